"""fairseq's Transformer decoder with RPE/URPE self-attention in every layer."""

import sys

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerDecoder
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq.modules.checkpoint_activations import checkpoint_wrapper

from ..modules import (
    ALiBiBias,
    LearnedDistanceBias,
    LogBias,
    RelativeMultiheadAttention,
    T5RelativeBias,
    ToeplitzReweighting,
)
from .relative_position_config import POSITION_KINDS, RelativeTransformerConfig


def build_position_bias(cfg, num_heads, bidirectional=False):
    """The bias ``b`` of ``--rpe-kind`` (``None`` for 'none'); raises naming the option on bad combinations."""
    kind, slopes = str(cfg.rpe_kind), cfg.rpe_slopes
    if slopes is not None and kind not in ("alibi", "log"):
        raise ValueError(f"--rpe-slopes applies to --rpe-kind alibi or log; --rpe-kind {kind} has no slopes")
    if kind == "t5":
        return T5RelativeBias(num_heads, cfg.rpe_num_buckets, cfg.rpe_max_distance, bidirectional, str(cfg.rpe_init))
    if kind == "alibi":
        return ALiBiBias(num_heads, learnable=str(slopes) == "learned")
    if kind == "log":
        return LogBias(num_heads, learnable=str(slopes or "learned") == "learned")
    if kind == "learned":
        return LearnedDistanceBias(num_heads, cfg.rpe_max_distance, bidirectional, str(cfg.rpe_init))
    if kind == "none":
        return None
    raise ValueError(f"--rpe-kind must be one of {', '.join(POSITION_KINDS)}; got {kind!r}")


def build_toeplitz(cfg, num_heads, bidirectional=False):
    """URPE's ``c`` of ``--urpe-toeplitz`` (``None`` for 'none', i.e. RPE)."""
    if cfg.urpe_toeplitz == "none":
        return None
    if cfg.urpe_toeplitz == "bucketed":
        return ToeplitzReweighting(num_heads, "bucketed", cfg.rpe_num_buckets, cfg.rpe_max_distance, bidirectional)
    if cfg.urpe_max_distance is None:
        raise ValueError("--urpe-toeplitz unique needs --urpe-max-distance (or --tokens-per-sample)")
    return ToeplitzReweighting(
        num_heads, str(cfg.urpe_toeplitz), max_distance=cfg.urpe_max_distance, bidirectional=bidirectional,
        beyond_max=str(cfg.urpe_beyond_max),
    )


class RelativeDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer whose self-attention is :class:`RelativeMultiheadAttention`."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if add_bias_kv or add_zero_attn or cfg.cross_self_attention:
            raise ValueError("RPE/URPE layers do not support add_bias_kv, add_zero_attn or --cross-self-attention")
        heads = cfg.decoder.attention_heads
        return RelativeMultiheadAttention(
            embed_dim,
            heads,
            position_bias=build_position_bias(cfg, heads),
            toeplitz=build_toeplitz(cfg, heads),
            dot_product=not cfg.dot_product_free,
            dropout=cfg.attention_dropout,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            attention_impl=str(cfg.urpe_attention_impl),
        )


class RelativeTransformerDecoder(TransformerDecoder):
    """Stock decoder (embeddings, layer norms, adaptive softmax, incremental decoding) with relative layers.

    ``b`` and ``c`` are one set shared by all layers (T5, Luo et al.) unless ``--rpe-per-layer``; the
    shared modules appear under every layer's ``self_attn`` in the state dict, as tied weights do.
    """

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(
            RelativeTransformerConfig.from_namespace(args),
            dictionary,
            embed_tokens,
            no_encoder_attn=no_encoder_attn,
            output_projection=output_projection,
        )
        if not self.cfg.rpe_per_layer:
            first = self.layers[0].self_attn
            for layer in self.layers[1:]:
                layer.self_attn.position_bias = first.position_bias
                layer.self_attn.toeplitz = first.toeplitz

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        # fairseq's TransformerDecoderBase.build_decoder_layer with our layer class: same wrappers.
        layer = RelativeDecoderLayer(cfg, no_encoder_attn)
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)

    def max_positions(self):
        """No limit without absolute embeddings (fairseq's ``sys.maxsize``). A 'unique' C table with
        ``--urpe-beyond-max error`` refuses longer inputs itself, naming the option, instead of
        reporting a bound that fairseq-eval-lm would silently skip inputs by."""
        if self.embed_positions is not None:
            return super().max_positions()
        return sys.maxsize
