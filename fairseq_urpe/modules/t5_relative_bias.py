"""The RPE bias ``B_ij = b_h(bucket(i - j))``: T5's learned scalar per head and log-spaced bucket."""

from torch import nn

from .distance_index import BucketIndex
from .learned_table import LearnedTable


class T5RelativeBias(LearnedTable):
    """Learned relative-position bias, one scalar per head and bucket; starts at zero.

    ``forward(query_positions (T,), key_positions (S,)) -> (H, T, S)`` bias (at least float32), added to the
    attention scores before the softmax.
    """

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = False):
        index = BucketIndex(num_buckets, max_distance, bidirectional, names=("--rpe-num-buckets", "--rpe-max-distance"))
        super().__init__(num_heads, index)
        self.num_buckets = num_buckets

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.weight)  # b = 0: attention starts without position information
