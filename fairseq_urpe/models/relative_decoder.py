"""fairseq's Transformer decoder with RPE/URPE self-attention in every layer."""

import sys

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerDecoder
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq.modules.checkpoint_activations import checkpoint_wrapper

from ..modules import RelativeMultiheadAttention, T5RelativeBias, ToeplitzReweighting
from .relative_position_config import RelativeTransformerConfig


def build_position_modules(cfg, num_heads):
    """``(position_bias, toeplitz)`` for one attention: T5 bias ``b`` and URPE's ``c`` (or ``None`` for RPE)."""
    bias = T5RelativeBias(num_heads, cfg.rpe_num_buckets, cfg.rpe_max_distance)
    if cfg.urpe_toeplitz == "none":
        return bias, None
    if cfg.urpe_toeplitz == "bucketed":
        toeplitz = ToeplitzReweighting(num_heads, "bucketed", cfg.rpe_num_buckets, cfg.rpe_max_distance)
    else:
        if cfg.urpe_max_distance is None:
            raise ValueError("--urpe-toeplitz unique needs --urpe-max-distance (or --tokens-per-sample)")
        toeplitz = ToeplitzReweighting(
            num_heads, str(cfg.urpe_toeplitz), max_distance=cfg.urpe_max_distance, beyond_max=str(cfg.urpe_beyond_max)
        )
    return bias, toeplitz


class RelativeDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer whose self-attention is :class:`RelativeMultiheadAttention`."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if add_bias_kv or add_zero_attn or cfg.cross_self_attention:
            raise ValueError("RPE/URPE layers do not support add_bias_kv, add_zero_attn or --cross-self-attention")
        heads = cfg.decoder.attention_heads
        position_bias, toeplitz = build_position_modules(cfg, heads)
        return RelativeMultiheadAttention(
            embed_dim,
            heads,
            position_bias=position_bias,
            toeplitz=toeplitz,
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
