"""fairseq's Transformer decoder with RPE/URPE self-attention in every layer."""

import sys

from fairseq.models.transformer import TransformerDecoder
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from .relative_position_config import RelativeTransformerConfig
from .shared_positions import SharedPositionsMixin, relative_self_attention, wrap_layer


class RelativeDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer whose self-attention is :class:`RelativeMultiheadAttention`, using the
    decoder's shared position modules (``shared_positions``) or, if ``None``, its own."""

    def __init__(self, cfg, no_encoder_attn=False, shared_positions=None):
        self.shared_positions = shared_positions  # read by build_self_attention, which super().__init__ calls
        super().__init__(cfg, no_encoder_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if add_bias_kv or add_zero_attn or cfg.cross_self_attention:
            raise ValueError("RPE/URPE layers do not support add_bias_kv, add_zero_attn or --cross-self-attention")
        return relative_self_attention(self, cfg, embed_dim, cfg.decoder.attention_heads, self.shared_positions,
                                       bidirectional=False)


class RelativeTransformerDecoder(SharedPositionsMixin, TransformerDecoder):
    """Stock decoder (embeddings, layer norms, adaptive softmax, incremental decoding) with relative layers.

    ``b`` and ``c`` are one set shared by all layers (T5, Luo et al.) unless ``--rpe-per-layer``: built
    here once, owned here, handed to every layer (:mod:`.shared_positions`). Each forward (each decoding
    step) evaluates them once for all layers: ``extract_features`` runs fairseq's under
    ``one_forward()``, in which the first attention to ask makes the tables and the others reuse them.
    """

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        cfg = RelativeTransformerConfig.from_namespace(args)
        self.init_shared_positions(cfg, cfg.decoder.attention_heads, cfg.decoder.embed_dim, bidirectional=False)
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self.own_shared_positions()

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return wrap_layer(RelativeDecoderLayer(cfg, no_encoder_attn, self.shared_positions), cfg)

    def extract_features(self, *args, **kwargs):
        with self.one_forward():
            return super().extract_features(*args, **kwargs)

    def max_positions(self):
        """No limit without absolute embeddings (fairseq's ``sys.maxsize``). A 'unique' C table with
        ``--urpe-beyond-max error`` refuses longer inputs itself, naming the option, instead of
        reporting a bound that fairseq-eval-lm would silently skip inputs by."""
        if self.embed_positions is not None:
            return super().max_positions()
        return sys.maxsize
