"""ALiBi's linear bias ``b_h(k) = -m_h |k|`` (Press et al., ICLR 2022) with its geometric slopes."""

import math
from typing import List

import torch
from torch import nn

from .precision import at_least_float32
from .position_tables import RelativePositionFunction
from .score_function import table_of


def alibi_slopes(num_heads: int) -> List[float]:
    """Press et al.'s schedule: for ``H = 2^a`` heads, ``m_h = 2^(-8 (h + 1) / H)``, ``h = 0 .. H-1``.

    Otherwise the schedule of the largest power of two ``P < H``, then every other slope of the
    ``2P`` schedule (the ones ``P`` lacks) until there are ``H``.
    """
    if num_heads <= 0:
        raise ValueError(f"ALiBi needs at least one attention head, got {num_heads}")

    def power_of_two_schedule(n: int) -> List[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two_schedule(closest)
    return slopes + power_of_two_schedule(2 * closest)[0::2][: num_heads - closest]


def alibi_line(num_heads: int, distance: torch.Tensor) -> torch.Tensor:
    """ALiBi's bias ``-m_h |d|`` at the distances ``d`` (n,), with Press et al.'s slopes: (H, n) float32."""
    return -torch.tensor(alibi_slopes(num_heads))[:, None] * distance.abs().float()


class ALiBiBias(RelativePositionFunction):
    """``b_h(i - j) = -m_h |i - j|``, defined at every length (future keys, if causal, are masked anyway).

    Slopes follow :func:`alibi_slopes`; fixed (a non-persistent buffer, recomputed on load) unless
    ``learnable``, when they are a parameter ``(H,)`` initialised to the schedule and left unconstrained.
    """

    def __init__(self, num_heads: int, learnable: bool = False):
        super().__init__()
        self.num_heads = num_heads
        self.learnable = learnable
        slopes = torch.tensor(alibi_slopes(num_heads))
        if learnable:
            self.slopes = nn.Parameter(slopes)  # m_h: (H,)
        else:
            self.register_buffer("slopes", slopes, persistent=False)

    def score(self, head: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        """``-m_h |k|`` element-wise at ``head``, ``distance`` (broadcastable, long)."""
        return -at_least_float32(self.slopes)[head] * distance.abs()

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        return table_of(self.score, self.num_heads, distance)  # (H, ...)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, learnable={self.learnable}"
