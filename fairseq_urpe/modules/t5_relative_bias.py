"""The RPE bias ``B_ij = b_h(bucket(i - j))``: T5's learned scalar per head and log-spaced bucket."""

from typing import Mapping

from .distance_index import BucketIndex
from .learned_table import LearnedBias


class T5RelativeBias(LearnedBias):
    """Learned relative-position bias, one scalar per head and bucket.

    ``start``: ``"zero"`` (T5) or ``"alibi"``: ``b_h(bucket) = -m_h d``, ALiBi's slope ``m_h`` times the
    bucket's nearest distance ``d`` (``--rpe-init``; see :func:`reset_bias`).

    ``forward(query_positions (T,), key_positions (S,)) -> (H, T, S)`` bias (at least float32), added to the
    attention scores before the softmax. ``names``: what errors call the arguments (default: their names).
    """

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = False,
                 start: str = "zero", names: Mapping[str, str] = {}):
        index = BucketIndex(num_buckets, max_distance, bidirectional,
                            names=(names.get("num_buckets", "num_buckets"), names.get("max_distance", "max_distance")))
        super().__init__(num_heads, index, start, names.get("start", "start"))
        self.num_buckets = num_buckets
