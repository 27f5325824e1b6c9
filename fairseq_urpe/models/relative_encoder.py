"""A bidirectional RoBERTa-style encoder with RPE/URPE self-attention, for token-level tasks.

The registered model ``relative_encoder`` is fairseq's ``TransformerEncoderBase`` (embeddings, layer
norms, padding) whose layers build :class:`RelativeMultiheadAttention` with *bidirectional* position
modules (``b`` and ``c`` see distances ``-D..D``), followed by fairseq's ``RobertaLMHead`` tied to the
input embeddings: ``logits (B, T, V)`` for every input position. No absolute positions unless
``--absolute-positions``. The named archs are ``relative_encoder_<variant>_<size>`` (end of this file).
"""

import sys
from dataclasses import dataclass, field

import torch.nn.functional as F
from torch import nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import ARCH_CONFIG_REGISTRY, FairseqEncoderModel, register_model, register_model_architecture
from fairseq.models.roberta.model import RobertaLMHead
from fairseq.models.transformer import Embedding, TransformerEncoderBase
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from fairseq.utils import get_available_activation_fns, safe_getattr

from ..modules import LearnedDistanceBias, RelativeMultiheadAttention
from .option_checks import (command_line_check, config_defaults, given_on_command_line, refuse_unread_given,
                            resolve_position_options)
from .position_options import POSITION_OPTIONS
from .relative_position_config import OPTION_TYPES, RelativePositionConfig, RelativeTransformerConfig, option_field
from .shared_positions import SharedPositionsMixin, relative_self_attention, wrap_layer


@dataclass
class RelativeEncoderConfig(RelativePositionConfig):
    """Encoder sizes (defaults: RoBERTa-base width, 3 layers, as in the URPE paper's synthetic tasks)."""

    rpe_init: OPTION_TYPES["rpe_init"] = option_field(  # the synthetic tasks' encoder keeps T5's flat start
        POSITION_OPTIONS["rpe_init"], default="zero", help="start of a learned bias b: 'zero' (flat, as T5) or 'alibi' "
        "(ALiBi's line)")
    encoder_layers: int = field(default=3, metadata={"help": "number of encoder layers"})
    encoder_embed_dim: int = field(default=768, metadata={"help": "width"})
    encoder_ffn_embed_dim: int = field(default=3072, metadata={"help": "FFN width"})
    encoder_attention_heads: int = field(default=12, metadata={"help": "attention heads"})
    encoder_normalize_before: bool = field(default=False, metadata={"help": "pre-norm layers (RoBERTa: post-norm)"})
    layernorm_embedding: bool = field(default=True, metadata={"help": "layer norm on the embeddings (RoBERTa)"})
    activation_fn: ChoiceEnum(get_available_activation_fns()) = field(default="gelu", metadata={"help": "FFN activation"})
    dropout: float = field(default=0.1, metadata={"help": "dropout"})
    attention_dropout: float = field(default=0.1, metadata={"help": "dropout on the attention weights"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN activation"})
    encoder_learned_pos: bool = field(
        default=False, metadata={"help": "with --absolute-positions: learned (RoBERTa) instead of sinusoidal"}
    )
    no_token_positional_embeddings: bool = field(
        default=False, metadata={"help": "set by the model from --absolute-positions; not a user option"}
    )
    max_source_positions: int = field(
        default=1024, metadata={"help": "size of the absolute position table (with --absolute-positions)"}
    )
    no_scale_embedding: bool = field(default=False, metadata={"help": "do not scale embeddings by sqrt(width)"})
    apply_bert_init: bool = field(
        default=False,
        metadata={"help": "BERT's initialisation (fairseq's init_bert_params: every Linear and Embedding N(0, 0.02), "
                          "zero biases) and a per-distance bias b drawn N(0, 0.02), as the URPE authors' encoder"},
    )
    untie_weights_roberta: bool = field(
        default=False, metadata={"help": "an output projection of its own instead of the input embeddings"}
    )


def apply_bert_init(model):
    """fairseq's ``init_bert_params`` on every submodule (dot-product-free attention has no query/key
    projections to draw), then ``b ~ N(0, 0.02)`` for per-distance biases; ``C`` keeps its ones."""
    for module in model.modules():
        if not (isinstance(module, RelativeMultiheadAttention) and module.q_proj is None):
            init_bert_params(module)
        if isinstance(module, LearnedDistanceBias):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)


class RelativeEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer whose self-attention is :class:`RelativeMultiheadAttention` (bidirectional),
    using the encoder's shared position modules (``shared_positions``) or, if ``None``, its own."""

    def __init__(self, cfg, return_fc=False, shared_positions=None):
        self.shared_positions = shared_positions  # read by build_self_attention, which super().__init__ calls
        super().__init__(cfg, return_fc)

    def build_self_attention(self, embed_dim, cfg):
        return relative_self_attention(self, cfg, embed_dim, cfg.encoder.attention_heads, self.shared_positions,
                                       bidirectional=True)


class RelativeTransformerEncoder(SharedPositionsMixin, TransformerEncoderBase):
    """Stock encoder with relative layers; ``b`` and ``c`` built once here and shared by all layers unless
    ``--rpe-per-layer`` (:mod:`.shared_positions`), evaluated once per forward."""

    def __init__(self, args, dictionary, embed_tokens):
        cfg = RelativeTransformerConfig.from_namespace(args)
        self.init_shared_positions(cfg, cfg.encoder.attention_heads, cfg.encoder.embed_dim, bidirectional=True)
        super().__init__(cfg, dictionary, embed_tokens)
        self.own_shared_positions()

    def build_encoder_layer(self, cfg):
        return wrap_layer(RelativeEncoderLayer(cfg, return_fc=self.return_fc, shared_positions=self.shared_positions), cfg)

    def forward(self, *args, **kwargs):
        with self.one_forward():
            return super().forward(*args, **kwargs)

    def max_positions(self):
        return super().max_positions() if self.embed_positions is not None else sys.maxsize


@register_model("relative_encoder", dataclass=RelativeEncoderConfig)
class RelativeEncoderModel(FairseqEncoderModel):
    """``forward(src_tokens, src_lengths) -> (logits (B, T, V), encoder output dict)``."""

    def __init__(self, encoder, head):
        super().__init__(encoder)
        self.head = head

    @classmethod
    def build_model(cls, args, task):
        length = task.max_positions() if isinstance(task.max_positions(), int) else None
        longest = (length or safe_getattr(args, "max_source_positions", 1024)) - 1
        longest_name = "--tokens-per-sample - 1" if length else "--max-source-positions - 1"
        resolve_position_options(args, config_defaults(RelativeEncoderConfig), longest, longest_name)
        if not safe_getattr(args, "absolute_positions", False):
            args.no_token_positional_embeddings = True
        elif length is not None:
            args.max_source_positions = max(length, safe_getattr(args, "max_source_positions", length))
        dictionary = task.source_dictionary
        embed_tokens = Embedding(len(dictionary), args.encoder_embed_dim, dictionary.pad())
        encoder = RelativeTransformerEncoder(args, dictionary, embed_tokens)
        tied = None if safe_getattr(args, "untie_weights_roberta", False) else embed_tokens.weight
        model = cls(encoder, RobertaLMHead(args.encoder_embed_dim, len(dictionary), args.activation_fn, weight=tied))
        if safe_getattr(args, "apply_bert_init", False):
            apply_bert_init(model)
        return model

    def forward(self, src_tokens, src_lengths=None, **kwargs):
        out = self.encoder(src_tokens, src_lengths=src_lengths)
        features = out["encoder_out"][0].transpose(0, 1)  # (B, T, E)
        return self.head(features), out  # (B, T, V)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        logits = net_output[0].float()  # (B, T, V)
        return F.log_softmax(logits, dim=-1) if log_probs else F.softmax(logits, dim=-1)

    def max_positions(self):
        return self.encoder.max_positions()


# Named archs: relative_encoder_<variant>_<size>. Variants as the URPE paper's synthetic table:
#   rpe   one learned bias per distance ("unique" RPE, --rpe-kind learned), no C
#   urpe  the same bias and a per-distance ("unique") C initialised to ones
#   ape   no relative bias; learned absolute positions (RoBERTa's)   (reference: should solve both)
#   nope  neither (reference: permutation-equivariant, should fail both)
ENCODER_VARIANTS = {
    "rpe": {"rpe_kind": "learned", "urpe_toeplitz": "none"},
    "urpe": {"rpe_kind": "learned", "urpe_toeplitz": "unique"},
    "ape": {"rpe_kind": "none", "urpe_toeplitz": "none", "absolute_positions": True, "encoder_learned_pos": True},
    "nope": {"rpe_kind": "none", "urpe_toeplitz": "none"},
}
# The paper size is the URPE authors' encoder (github.com/lsj2408/URPE: simulate_{RPE,URPE,noPE}.sh train
# their fairseq fork's roberta_base with --encoder-layers 3): post-norm layers, a layer norm on the unscaled
# embeddings, no dropout anywhere, BERT's initialisation (every weight N(0, 0.02), b too; C = 1). The
# reduced sizes keep fairseq's width-scaled initialisation and embedding scale sqrt(width) (at width 64,
# BERT's fixed 0.02 is a sixth of the usual 1/sqrt(width) scale), also without dropout.
AUTHORS_ENCODER = {"no_scale_embedding": True, "apply_bert_init": True}
ENCODER_SIZES = {  # layers, width, heads, FFN, extra options
    "paper": (3, 768, 12, 3072, AUTHORS_ENCODER),  # RoBERTa-base width, 3 layers (Luo et al., section 5.1)
    "cpu": (3, 64, 4, 256, {}),
    "tiny": (2, 32, 2, 64, {}),  # tests
}


def encoder_preset(options, sizes):
    layers, width, heads, ffn, extra = sizes

    def architecture(args):
        given = given_on_command_line(args)
        for name, value in {
            "encoder_layers": layers, "encoder_embed_dim": width, "encoder_attention_heads": heads,
            "encoder_ffn_embed_dim": ffn, "dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0,
            **extra, **options,
        }.items():
            setattr(args, name, safe_getattr(args, name, value))
        refuse_unread_given(args, given)

    return architecture


ENCODER_ARCHITECTURES = {}
# fairseq registers the model's own name as an arch that does nothing; ours checks what the command line gave.
ARCH_CONFIG_REGISTRY["relative_encoder"] = command_line_check(config_defaults(RelativeEncoderConfig))
for _variant, _options in ENCODER_VARIANTS.items():
    for _size, _sizes in ENCODER_SIZES.items():
        _name = f"relative_encoder_{_variant}_{_size}"
        ENCODER_ARCHITECTURES[_name] = register_model_architecture("relative_encoder", _name)(
            encoder_preset(_options, _sizes)
        )
