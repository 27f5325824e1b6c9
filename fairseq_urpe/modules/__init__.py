"""Attention and position modules; nothing here knows about argparse or fairseq tasks."""

from .relative_bucket import relative_position_bucket
from .relative_bias import T5RelativeBias
from .toeplitz import ToeplitzReweighting
from .urpe_attention import RelativeMultiheadAttention

__all__ = [
    "relative_position_bucket",
    "T5RelativeBias",
    "ToeplitzReweighting",
    "RelativeMultiheadAttention",
]
