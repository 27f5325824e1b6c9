"""Learned per-distance bias ``b_h(clip(i - j))`` (the scalar form of Shaw et al., NAACL 2018)."""

import torch
from torch import nn

from .alibi_bias import alibi_start
from .precision import at_least_float32
from .relative_bucket import clipped_distance_index
from .relative_bias import check_start
from .relative_position import RelativePositionFunction


class LearnedDistanceBias(RelativePositionFunction):
    """One learned scalar per head and distance ``|i - j| <= max_distance``; farther keys reuse the entry
    at ``max_distance`` (clipped). ``start``: ``"zero"`` or ``"alibi"`` (``b_h(d) = -m_h |d|``, ALiBi's line).

    Causal tables hold distances ``0 .. max_distance`` (future keys, masked, read entry 0);
    bidirectional ones also ``-max_distance .. -1``.
    """

    def __init__(self, num_heads: int, max_distance: int = 128, bidirectional: bool = False, start: str = "zero"):
        super().__init__()
        if max_distance <= 0:
            raise ValueError(f"--rpe-max-distance must be a positive integer, got {max_distance}")
        check_start(start)
        self.num_heads = num_heads
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        size = (2 * max_distance + 1) if bidirectional else (max_distance + 1)
        distance = torch.arange(-max_distance if bidirectional else 0, max_distance + 1)
        index = clipped_distance_index(distance, max_distance, bidirectional)
        table = alibi_start(num_heads, index, distance, size) if start == "alibi" else torch.zeros(num_heads, size)
        self.weight = nn.Parameter(table)  # b_h(distance): (H, size)

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        index = clipped_distance_index(distance, self.max_distance, self.bidirectional)
        return at_least_float32(self.weight)[:, index]  # (H, ...)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, max_distance={self.max_distance}, bidirectional={self.bidirectional}"
