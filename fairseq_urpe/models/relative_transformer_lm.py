"""The registered language model ``relative_transformer_lm`` (its named archs are in ``architectures``).

Absolute position embeddings are dropped unless ``--absolute-positions`` is given.
"""

from dataclasses import dataclass

from fairseq.models import register_model
from fairseq.models.transformer_lm import TransformerLanguageModel, TransformerLanguageModelConfig
from fairseq.utils import safe_getattr

from .option_checks import config_defaults, resolve_position_options
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
        longest = safe_getattr(args, "tokens_per_sample", 1024) - 1
        defaults = config_defaults(RelativeTransformerLanguageModelConfig)
        resolve_position_options(args, defaults, longest, "--tokens-per-sample - 1")
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
