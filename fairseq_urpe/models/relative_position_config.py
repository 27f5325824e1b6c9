"""Options the plugin adds to fairseq's Transformer LM (one dataclass: flags, ``--arch`` and hydra)."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models.transformer import TransformerConfig

from .position_kinds import OPTION_DEFAULTS, POSITION_KINDS, kinds_with_slopes

SLOPE_CHOICES = ChoiceEnum(["fixed", "learned"])
INIT_CHOICES = ChoiceEnum(["alibi", "zero"])
TOEPLITZ_CHOICES = ChoiceEnum(["none", "bucketed", "unique"])
BEYOND_MAX_CHOICES = ChoiceEnum(["clamp", "error"])
ATTENTION_IMPL_CHOICES = ChoiceEnum(["auto", "dense", "fused", "flex"])


@dataclass
class RelativePositionConfig(FairseqDataclass):
    rpe_kind: str = field(
        default="t5",
        metadata={
            "help": "the relative positions, b(k) added to the scores or q, k rotated, one of the registry's kinds "
            "(fairseq_urpe/models/position_kinds.py; a plugin may add more): "
            + "; ".join(f"'{name}': {kind.description}" for name, kind in POSITION_KINDS.items())
        },
    )
    rpe_slopes: Optional[SLOPE_CHOICES] = field(
        default=OPTION_DEFAULTS["rpe_slopes"],
        metadata={
            "help": f"slopes m of {' or '.join(repr(k) for k in kinds_with_slopes())}: 'fixed' or 'learned' (default: "
            + ", ".join(f"{POSITION_KINDS[k].slopes} for {k}" for k in kinds_with_slopes()) + ")"
        },
    )
    rpe_init: INIT_CHOICES = field(
        default=OPTION_DEFAULTS["rpe_init"],
        metadata={
            "help": "start of a learned bias b ('t5', 'learned'): 'alibi' (ALiBi's line -m_h|k|, at each bucket's "
            "nearest distance; a language model learns faster from it) or 'zero' (flat, as T5)"
        },
    )
    dot_product_free: bool = field(
        default=False,
        metadata={"help": "attention scores from the position bias alone, without QK^T (Wang & E, NeurIPS 2024)"},
    )
    rpe_num_buckets: int = field(
        default=OPTION_DEFAULTS["rpe_num_buckets"],
        metadata={"help": "T5 buckets of the RPE bias b (and of a bucketed URPE c); causal models use all for past distances"},
    )
    rpe_max_distance: int = field(
        default=OPTION_DEFAULTS["rpe_max_distance"],
        metadata={
            "help": "distance where T5's log-spaced buckets end, or the largest distance with its own 'learned' "
            "bias; farther keys share the last entry"
        },
    )
    rpe_per_layer: bool = field(
        default=False,
        metadata={"help": "learn b (and c) separately in every layer instead of one set shared by all layers"},
    )
    urpe_toeplitz: TOEPLITZ_CHOICES = field(
        default=OPTION_DEFAULTS["urpe_toeplitz"],
        metadata={
            "help": "URPE Toeplitz reweighting C: 'none' (plain RPE), 'bucketed' (c per T5 bucket of b) or "
            "'unique' (c per distance up to --urpe-max-distance)"
        },
    )
    urpe_max_distance: Optional[int] = field(
        default=OPTION_DEFAULTS["urpe_max_distance"],
        metadata={"help": "largest distance with its own c in the 'unique' table (default: --tokens-per-sample - 1)"},
    )
    urpe_beyond_max: BEYOND_MAX_CHOICES = field(
        default=OPTION_DEFAULTS["urpe_beyond_max"],
        metadata={"help": "'unique' C beyond --urpe-max-distance: 'clamp' reuses the last entry, 'error' refuses"},
    )
    urpe_attention_impl: ATTENTION_IMPL_CHOICES = field(
        default="auto",
        metadata={
            "help": "'auto': the path the measured dispatch table names for the call's configuration (GPU, dtype, "
            "head dim, tables, dropout; written by a GPU run of benchmarks/gpu_check.sh; "
            "$FAIRSEQ_URPE_DISPATCH_TABLE or ~/.cache/fairseq_urpe/dispatch_table.json) where it can run the call; "
            "otherwise the fused Triton kernel for a call where all of these hold, else the dense path: "
            "CUDA tensors; a supported triton (the one torch brings); float16, bfloat16, or float32 with TF32 "
            "allowed (torch.backends.cuda.matmul.allow_tf32); head dim <= 128; batch x heads <= 65535; "
            "dot-product scores; fairseq's causal mask; no attention weights asked for; not incremental "
            "decoding (always dense); torch.use_deterministic_algorithms not on without warn_only; the "
            "kernel passed its first-use self-check in this configuration and the first launch of this "
            "launch signature. Attention dropout runs inside the kernel at round(256 p) / 256, kept entries "
            "scaled by the inverse of the keep rate (--attention-dropout 0.1: 26/256 = 0.1016, kept entries x "
            "1.1130); a rate more than 10% from that (0.001 would be 0, 0.01 would be 0.0117) runs dense, and "
            "is an error under 'fused'. 'fused': the kernel, or an error "
            "naming this flag where it cannot run (for GPU runs that must not fall back); 'dense': plain "
            "PyTorch; 'flex': PyTorch's compiled flex_attention (URPE's C through its log-sum-exp), refused with "
            "--attention-dropout > 0, for training on CPU and for URPE on CPU; key padding, dot-product-free "
            "attention and shapes past torch's recompile limit run dense. A bias of the query and key positions "
            "(--rpe-kind fire) runs dense under 'auto' and 'dense'; 'fused' and 'flex' refuse it. The log names the "
            "path taken ('attention path: ...')"
        },
    )
    absolute_positions: bool = field(
        default=False,
        metadata={"help": "keep fairseq's absolute position embeddings as well (RPE/URPE archs drop them by default)"},
    )


@dataclass
class RelativeTransformerConfig(TransformerConfig, RelativePositionConfig):
    """fairseq's ``TransformerConfig`` with the relative-position options, so they reach the layers."""
