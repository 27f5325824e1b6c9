"""A learned per-head table read by distance: what T5's bias, the per-distance bias and URPE's ``c`` share."""

from typing import Optional, Union

import torch
from torch import nn

from .alibi_bias import alibi_line
from .distance_index import BucketIndex, ClippedIndex
from .precision import at_least_float32
from .position_tables import RelativePositionFunction


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

    def nearest_distances(self) -> torch.Tensor:
        """``(size,)``: per entry, the smallest ``|i - j|`` that reads it (float32; the index's)."""
        return self.index.nearest_distances()

    @property
    def constant_from(self) -> int:
        """The causal distance from which every distance reads the same entry as it: the clip
        (``max_distance``), or the first distance of T5's last bucket (the index's ``constant_from``)."""
        return self.index.constant_from

    @property
    def longest_distance(self) -> Optional[int]:
        """``max_distance`` where farther distances raise (``--urpe-beyond-max error``), else ``None``."""
        return self.index.max_distance if getattr(self.index, "beyond_max", "clamp") == "error" else None

    @property
    def bidirectional(self) -> bool:
        return self.index.bidirectional

    @property
    def max_distance(self) -> int:
        return self.index.max_distance

    def score(self, head: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        """``w_h[index(k)]`` element-wise at ``head``, ``distance`` (broadcastable, long)."""
        return at_least_float32(self.weight)[head, self.index(distance)]

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        # score at every head, by slicing: indexing with a head index too would keep that index for backward
        return at_least_float32(self.weight)[:, self.index(distance)]  # (H, ...)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, {self.index!r}"


class LearnedBias(LearnedTable):
    """A learned bias ``b``: a :class:`LearnedTable` that starts at ``start``, ``"zero"`` (flat, as T5) or
    ``"alibi"`` (ALiBi's line ``-m_h |d|`` at each entry's nearest distance; see :func:`reset_bias`).
    ``start_name``: what errors call ``start``."""

    def __init__(self, num_heads: int, index: Union[BucketIndex, ClippedIndex], start: str = "zero",
                 start_name: str = "start"):
        check_bias_start(start, start_name)
        self.start = start  # read by reset_parameters, which LearnedTable's __init__ calls
        super().__init__(num_heads, index)

    def reset_parameters(self) -> None:
        reset_bias(self, self.start)


BIAS_STARTS = ("alibi", "zero")


def check_bias_start(start: str, name: str = "start") -> None:
    if start not in BIAS_STARTS:
        raise ValueError(f"{name} must be one of {', '.join(BIAS_STARTS)}; got {start!r}")


def reset_bias(table: LearnedTable, start: str) -> None:
    """``b = 0`` (``zero``: attention starts without position information, as T5) or ALiBi's line at each
    entry's nearest distance (``alibi``: ``b_h = -m_h |d|``, so training starts from ALiBi's local attention)."""
    with torch.no_grad():
        if start == "zero":
            table.weight.zero_()
        else:
            table.weight.copy_(alibi_line(table.num_heads, table.nearest_distances()))
