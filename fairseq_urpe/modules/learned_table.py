"""A learned per-head table read by distance: what T5's bias, the per-distance bias and URPE's ``c`` share."""

from typing import Union

import torch
from torch import nn

from .distance_index import BucketIndex, ClippedIndex
from .precision import at_least_float32
from .relative_position import RelativePositionFunction


class LearnedTable(RelativePositionFunction):
    """``f_h(i - j) = w_h[index(i - j)]``: one learned scalar per head and table entry.

    ``index`` (chosen once, at construction) maps a distance to an entry: T5's buckets
    (:class:`BucketIndex`) or the clipped distance (:class:`ClippedIndex`). ``weight``: (H, index.size).
    Subclasses say what the table is and where it starts, in :meth:`reset_parameters`.
    """

    def __init__(self, num_heads: int, index: Union[BucketIndex, ClippedIndex]):
        super().__init__()
        self.num_heads = num_heads
        self.index = index
        self.weight = nn.Parameter(torch.empty(num_heads, index.size))  # w_h(entry): (H, size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        raise NotImplementedError

    @property
    def bidirectional(self) -> bool:
        return self.index.bidirectional

    @property
    def max_distance(self) -> int:
        return self.index.max_distance

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        return at_least_float32(self.weight)[:, self.index(distance)]  # (H, ...)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, {self.index!r}"
