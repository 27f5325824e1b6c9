"""Learned per-distance bias ``b_h(clip(i - j))`` (the scalar form of Shaw et al., NAACL 2018)."""

from torch import nn

from .distance_index import ClippedIndex
from .learned_table import LearnedTable


class LearnedDistanceBias(LearnedTable):
    """One learned scalar per head and distance ``|i - j| <= max_distance``; farther keys reuse the entry
    at ``max_distance`` (clipped). Starts at zero.

    Causal tables hold distances ``0 .. max_distance`` (future keys, masked, read entry 0);
    bidirectional ones also ``-max_distance .. -1``.
    """

    def __init__(self, num_heads: int, max_distance: int = 128, bidirectional: bool = False):
        super().__init__(num_heads, ClippedIndex(max_distance, bidirectional, name="--rpe-max-distance"))

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.weight)  # b = 0: attention starts without position information
