"""The registered language model ``relative_transformer_lm`` and its architectures.

``transformer_lm_rpe*`` use RPE attention (T5 bias, ``--urpe-toeplitz none``), ``transformer_lm_urpe*``
URPE attention (``--urpe-toeplitz bucketed``); sizes follow fairseq's ``transformer_lm`` presets.
Neither uses absolute position embeddings unless ``--absolute-positions`` is given.
"""

from dataclasses import dataclass

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer_lm import (
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    base_lm_architecture,
    transformer_lm_baevski_wiki103,
    transformer_lm_gpt2_small,
)
from fairseq.utils import safe_getattr

from .relative_decoder import RelativeTransformerDecoder
from .relative_position_config import RelativePositionConfig


@dataclass
class RelativeTransformerLanguageModelConfig(TransformerLanguageModelConfig, RelativePositionConfig):
    """``transformer_lm``'s options plus :class:`RelativePositionConfig`."""


@register_model("relative_transformer_lm", dataclass=RelativeTransformerLanguageModelConfig)
class RelativeTransformerLanguageModel(TransformerLanguageModel):
    """fairseq's ``TransformerLanguageModel`` whose decoder layers use RPE/URPE self-attention."""

    @classmethod
    def build_model(cls, args, task):
        if safe_getattr(args, "urpe_max_distance", None) is None:
            args.urpe_max_distance = safe_getattr(args, "tokens_per_sample", 1024) - 1
        # Here rather than in the archs, so `--arch relative_transformer_lm` and hydra's
        # `model=relative_transformer_lm` (which run no arch function) drop them too.
        if not safe_getattr(args, "absolute_positions", False):
            args.no_token_positional_embeddings = True
        # The parent builds the token embeddings (plain, adaptive or character) and checks the adaptive
        # options; its decoder is discarded for ours, which shares those embeddings. Building that
        # decoder without layers saves seconds and ~1 GB at the wiki103 size.
        layers, args.decoder_layers = args.decoder_layers, 0
        try:
            stock = super().build_model(args, task)
        finally:
            if args.decoder_layers == 0:  # else the parent set it from --decoder-layers-to-keep
                args.decoder_layers = layers
        decoder = RelativeTransformerDecoder(args, task.target_dictionary, stock.decoder.embed_tokens, no_encoder_attn=True)
        return cls(decoder)


def relative_lm_architecture(args, toeplitz):
    """``base_lm_architecture`` with the given ``C`` (absolute embeddings are dropped in ``build_model``)."""
    args.urpe_toeplitz = safe_getattr(args, "urpe_toeplitz", toeplitz)
    base_lm_architecture(args)


def tiny_sizes(args):
    """A model small enough for tests and the CPU demo: 2 layers, width 64, 4 heads."""
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 64)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 256)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 4)


@register_model_architecture("relative_transformer_lm", "transformer_lm_rpe")
def transformer_lm_rpe(args):
    relative_lm_architecture(args, "none")


@register_model_architecture("relative_transformer_lm", "transformer_lm_urpe")
def transformer_lm_urpe(args):
    relative_lm_architecture(args, "bucketed")


@register_model_architecture("relative_transformer_lm", "transformer_lm_rpe_tiny")
def transformer_lm_rpe_tiny(args):
    tiny_sizes(args)
    transformer_lm_rpe(args)


@register_model_architecture("relative_transformer_lm", "transformer_lm_urpe_tiny")
def transformer_lm_urpe_tiny(args):
    tiny_sizes(args)
    transformer_lm_urpe(args)


@register_model_architecture("relative_transformer_lm", "transformer_lm_rpe_wiki103")
def transformer_lm_rpe_wiki103(args):
    transformer_lm_baevski_wiki103(args)  # adaptive input/softmax, 16 layers, width 1024
    transformer_lm_rpe(args)


@register_model_architecture("relative_transformer_lm", "transformer_lm_urpe_wiki103")
def transformer_lm_urpe_wiki103(args):
    transformer_lm_baevski_wiki103(args)
    transformer_lm_urpe(args)


@register_model_architecture("relative_transformer_lm", "transformer_lm_rpe_gpt2_small")
def transformer_lm_rpe_gpt2_small(args):
    transformer_lm_gpt2_small(args)  # 24 layers, width 1024, 16 heads, GELU
    transformer_lm_rpe(args)


@register_model_architecture("relative_transformer_lm", "transformer_lm_urpe_gpt2_small")
def transformer_lm_urpe_gpt2_small(args):
    transformer_lm_gpt2_small(args)
    transformer_lm_urpe(args)
