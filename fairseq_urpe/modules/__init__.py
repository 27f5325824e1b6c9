"""Attention and position modules; nothing here knows about argparse or fairseq tasks."""

from .alibi_bias import ALiBiBias, alibi_slopes
from .distance_index import BucketIndex, ClippedIndex, clipped_distance_index, relative_position_bucket
from .fire_bias import FireBias
from .kerple_bias import KerpleBias
from .learned_distance_bias import LearnedDistanceBias
from .learned_table import LearnedBias, LearnedTable
from .log_bias import LogBias
from .position_tables import PositionModules, PositionTables, RelativePositionFunction, reads_by_distance
from .rotary_embedding import RotaryEmbedding
from .t5_relative_bias import T5RelativeBias
from .toeplitz_reweighting import ToeplitzReweighting
from .relative_multihead_attention import RelativeMultiheadAttention

__all__ = [
    "ALiBiBias",
    "alibi_slopes",
    "BucketIndex",
    "ClippedIndex",
    "clipped_distance_index",
    "relative_position_bucket",
    "FireBias",
    "KerpleBias",
    "LearnedDistanceBias",
    "LearnedBias",
    "LearnedTable",
    "LogBias",
    "PositionModules",
    "PositionTables",
    "RelativePositionFunction",
    "reads_by_distance",
    "RotaryEmbedding",
    "T5RelativeBias",
    "ToeplitzReweighting",
    "RelativeMultiheadAttention",
]
