"""The logarithmic bias ``b_h(k) = -m_h log(1 + |k|)`` (log-RPE of Wang & E, NeurIPS 2024; KERPLE-log)."""

import torch
from torch import nn
from torch.nn import functional as F

from .alibi_bias import alibi_slopes
from .precision import at_least_float32
from .position_tables import RelativePositionFunction
from .score_function import table_of

INITIAL_SLOPE_SCALE = 8.0


def initial_log_slopes(num_heads: int) -> torch.Tensor:
    """``8 x`` ALiBi's schedule: for 8 heads ``m = 4, 2, 1, ..., 1/32``, so the heads start between a
    sharply local ``(1 + k)^-4`` and a nearly flat ``(1 + k)^-1/32`` attention."""
    return INITIAL_SLOPE_SCALE * torch.tensor(alibi_slopes(num_heads))


class LogBias(RelativePositionFunction):
    """``b_h(i - j) = -m_h log(1 + |i - j|)`` with slopes ``m_h > 0``; defined at every length.

    Learnable slopes (the default) are ``m_h = softplus(rho_h)``, a parameter ``rho`` ``(H,)``, so they
    stay positive; fixed slopes are a non-persistent buffer. Both start at :func:`initial_log_slopes`.
    """

    def __init__(self, num_heads: int, learnable: bool = True):
        super().__init__()
        self.num_heads = num_heads
        self.learnable = learnable
        slopes = initial_log_slopes(num_heads)
        if learnable:
            self.rho = nn.Parameter(torch.log(torch.expm1(slopes)))  # softplus^-1(m): (H,)
        else:
            self.register_buffer("fixed_slopes", slopes, persistent=False)

    def slopes(self) -> torch.Tensor:
        """``m_h``: (H,), at least float32."""
        if self.learnable:
            return F.softplus(at_least_float32(self.rho))
        return at_least_float32(self.fixed_slopes)

    def score(self, head: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        """``-m_h log(1 + |k|)`` element-wise at ``head``, ``distance`` (broadcastable, long)."""
        slopes = self.slopes()[head]
        return -slopes * torch.log1p(distance.abs().to(slopes.dtype))

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        return table_of(self.score, self.num_heads, distance)  # (H, ...)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, learnable={self.learnable}"
