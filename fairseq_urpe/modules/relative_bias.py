"""The RPE bias ``B_ij = b_h(bucket(i - j))``: T5's learned scalar per head and log-spaced bucket."""

import torch
from torch import nn

from .alibi_bias import alibi_start
from .precision import at_least_float32
from .relative_bucket import check_bucket_options, relative_position_bucket
from .relative_position import RelativePositionFunction


STARTS = ("zero", "alibi")


def check_start(start: str) -> None:
    if start not in STARTS:
        raise ValueError(f"--rpe-init must be one of {', '.join(STARTS)}; got {start!r}")


class T5RelativeBias(RelativePositionFunction):
    """Learned relative-position bias, one scalar per head and bucket.

    ``start``: ``"zero"`` (T5) or ``"alibi"``: ``b_h(bucket) = -m_h d``, ALiBi's slope ``m_h`` times the
    bucket's nearest distance ``d``, so training starts from ALiBi's local attention instead of a flat one.

    ``forward(query_positions (T,), key_positions (S,)) -> (H, T, S)`` bias (at least float32), added to the
    attention scores before the softmax.
    """

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = False,
                 start: str = "zero"):
        super().__init__()
        check_bucket_options(num_buckets, max_distance, bidirectional, names=("--rpe-num-buckets", "--rpe-max-distance"))
        check_start(start)
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        distance = torch.arange(-2 * max_distance, 2 * max_distance + 1)  # reaches every bucket
        buckets = relative_position_bucket(distance, num_buckets, max_distance, bidirectional)
        table = alibi_start(num_heads, buckets, distance, num_buckets) if start == "alibi" else torch.zeros(num_heads, num_buckets)
        self.weight = nn.Parameter(table)  # b_h(bucket): (H, num_buckets)

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        buckets = relative_position_bucket(distance, self.num_buckets, self.max_distance, self.bidirectional)
        return at_least_float32(self.weight)[:, buckets]  # (H, ...)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )
