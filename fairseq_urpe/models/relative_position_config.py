"""Options the plugin adds to fairseq's Transformer LM (one dataclass: flags, ``--arch`` and hydra).

The position options' fields are written from their declarations (``position_options``); the
attention's own are declared here."""

from dataclasses import dataclass, field, make_dataclass
from typing import Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models.transformer import TransformerConfig

from .option_checks import kinds_reading
from .position_kinds import POSITION_KINDS
from .position_options import POSITION_OPTIONS, PositionOption

ATTENTION_IMPL_CHOICES = ChoiceEnum(["auto", "dense", "fused", "flex"])


def option_type(option: PositionOption):
    """The dataclass type of ``option``: a ``ChoiceEnum`` of its choices, else its type; ``Optional`` where
    its default is ``None``."""
    kind = ChoiceEnum(list(option.choices)) if option.choices is not None else option.type
    return Optional[kind] if option.default is None else kind


def option_help(option: PositionOption) -> str:
    """``option``'s help with the registry filled in: ``{readers}``, ``{kind_defaults}``, ``{kinds}``."""
    readers = kinds_reading(option.field)
    return option.help.format(
        readers=" or ".join(repr(name) for name in readers),
        kind_defaults=", ".join(f"{POSITION_KINDS[name].defaults[option.field]} for {name}" for name in readers
                                if option.field in POSITION_KINDS[name].defaults),
        kinds="; ".join(f"'{name}': {kind.description}" for name, kind in POSITION_KINDS.items()))


def option_field(option: PositionOption, **changes):
    """``option`` as a field of a config dataclass; ``changes``: another ``default`` or ``help``."""
    return field(default=changes.get("default", option.default),
                 metadata={"help": changes.get("help", option_help(option))})


OPTION_TYPES = {name: option_type(option) for name, option in POSITION_OPTIONS.items()}
# The position options' fields, written from their declarations (position_options.POSITION_OPTIONS).
PositionOptionsConfig = make_dataclass(
    "PositionOptionsConfig", [(name, OPTION_TYPES[name], option_field(option)) for name, option in POSITION_OPTIONS.items()],
    bases=(FairseqDataclass,))
PositionOptionsConfig.__module__ = __name__
PositionOptionsConfig.__doc__ = "The position options, one field per declaration of ``position_options``."


@dataclass
class RelativePositionConfig(PositionOptionsConfig):
    """The position options and the attention's."""

    dot_product_free: bool = field(
        default=False,
        metadata={"help": "attention scores from the position bias alone, without QK^T (Wang & E, NeurIPS 2024)"},
    )
    rpe_per_layer: bool = field(
        default=False,
        metadata={"help": "learn b (and c) separately in every layer instead of one set shared by all layers"},
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
            "decoding (always dense); the "
            "kernel passed its first-use self-check in this configuration and the first launch of this "
            "launch signature. Attention dropout runs inside the kernel at round(256 p) / 256, kept entries "
            "scaled by the inverse of the keep rate (--attention-dropout 0.1: 26/256 = 0.1016, kept entries x "
            "1.1130); a rate more than 10% from that (0.001 would be 0, 0.01 would be 0.0117) runs dense, and "
            "is an error under 'fused'. Under torch.use_deterministic_algorithms the kernel's backward adds nothing by "
            "atomics (the same gradients bit for bit from run to run). 'fused': the kernel, or an error "
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
