"""The RPE bias ``B_ij = b_h(bucket(i - j))``: T5's learned scalar per head and log-spaced bucket."""

import torch
from torch import nn

from .precision import at_least_float32
from .relative_bucket import check_bucket_options, relative_position_bucket
from .relative_position import RelativePositionFunction


class T5RelativeBias(RelativePositionFunction):
    """Learned relative-position bias, one scalar per head and bucket; starts at zero.

    ``forward(query_positions (T,), key_positions (S,)) -> (H, T, S)`` bias (at least float32), added to the
    attention scores before the softmax.
    """

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = False):
        super().__init__()
        check_bucket_options(num_buckets, max_distance, bidirectional, names=("--rpe-num-buckets", "--rpe-max-distance"))
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.weight = nn.Parameter(torch.zeros(num_heads, num_buckets))  # b_h(bucket): (H, num_buckets)

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        buckets = relative_position_bucket(distance, self.num_buckets, self.max_distance, self.bidirectional)
        return at_least_float32(self.weight)[:, buckets]  # (H, ...)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )
