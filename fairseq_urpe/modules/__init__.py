"""Attention and position modules; nothing here knows about argparse or fairseq tasks."""

from .alibi_bias import ALiBiBias, alibi_slopes
from .distance_bias import LearnedDistanceBias
from .log_bias import LogBias
from .relative_bias import T5RelativeBias
from .relative_bucket import clipped_distance_index, relative_position_bucket
from .relative_position import RelativePositionFunction
from .toeplitz import ToeplitzReweighting
from .urpe_attention import RelativeMultiheadAttention

__all__ = [
    "ALiBiBias",
    "alibi_slopes",
    "LearnedDistanceBias",
    "LogBias",
    "T5RelativeBias",
    "clipped_distance_index",
    "relative_position_bucket",
    "RelativePositionFunction",
    "ToeplitzReweighting",
    "RelativeMultiheadAttention",
]
