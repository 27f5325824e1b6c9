"""Learned per-distance bias ``b_h(clip(i - j))`` (the scalar form of Shaw et al., NAACL 2018)."""

from typing import Mapping

from .distance_index import ClippedIndex
from .learned_table import LearnedBias


class LearnedDistanceBias(LearnedBias):
    """One learned scalar per head and distance ``|i - j| <= max_distance``; farther keys reuse the entry
    at ``max_distance`` (clipped). ``start``: ``"zero"`` or ``"alibi"`` (ALiBi's line ``-m_h |d|``, clipped
    like the table; ``--rpe-init``, see :func:`reset_bias`).

    Causal tables hold distances ``0 .. max_distance`` (future keys, masked, read entry 0);
    bidirectional ones also ``-max_distance .. -1``. ``names``: what errors call the arguments.
    """

    def __init__(self, num_heads: int, max_distance: int = 128, bidirectional: bool = False, start: str = "zero",
                 names: Mapping[str, str] = {}):
        index = ClippedIndex(max_distance, bidirectional, names=(names.get("max_distance", "max_distance"), "beyond_max"))
        super().__init__(num_heads, index, start, names.get("start", "start"))
