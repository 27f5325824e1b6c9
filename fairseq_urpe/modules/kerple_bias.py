"""KERPLE's biases (Chi et al., NeurIPS 2022): conditionally positive definite kernels of the distance,
shifted into the scores.

    log     b_h(k) = -r1_h log(1 + r2_h |k|)    r1, r2 > 0
    power   b_h(k) = -r1_h |k|^r2_h             r1 > 0, 0 < r2 <= 2

Both have the same two learned scalars per head and the same call shape, so one module holds both.
"""

import torch
from torch import nn

from .position_tables import RelativePositionFunction
from .precision import at_least_float32
from .score_function import table_of

KERNELS = ("log", "power")
FLOOR = 1e-2  # the authors' lower bound for r1 and r2
POWER_CEILING = 2.0  # the power kernel is conditionally positive definite for exponents up to 2


def clamp_passing_gradient(value: torch.Tensor, low: float, high: float = None) -> torch.Tensor:
    """``value`` clamped to ``[low, high]``, with the gradient of ``value`` itself (the identity's).

    The authors' code overwrites the parameters' data with their clamped values before each use, so the
    bias sees the clamped value and the gradient taken there reaches the parameter in full. This does the
    same without writing to the parameter: within the bounds the two are identical; once an update takes
    a parameter beyond a bound, theirs is reset to it and this one stays where the optimizer put it
    (read as the bound) until later updates bring it back.
    """
    return value + (value.clamp(low, high) - value).detach()


class KerpleBias(RelativePositionFunction):
    """``b_h(i - j)`` of KERPLE's ``kernel`` (``log`` or ``power``), defined at every length.

    Parameters ``r1``, ``r2``: (H,), drawn as the authors draw them, ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)`` for
    ``log`` and ``r1 ~ U(0, 1)``, ``r2 ~ U(0, 2)`` for ``power``; each use reads them clamped to at least
    :data:`FLOOR` (and ``r2`` of ``power`` to at most :data:`POWER_CEILING`), see :func:`clamp_passing_gradient`.
    """

    def __init__(self, num_heads: int, kernel: str = "log"):
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}; got {kernel!r}")
        self.num_heads, self.kernel = num_heads, kernel
        r1_scale, r2_scale = (2.0, 1.0) if kernel == "log" else (1.0, 2.0)
        self.r1 = nn.Parameter(torch.rand(num_heads) * r1_scale)  # (H,)
        self.r2 = nn.Parameter(torch.rand(num_heads) * r2_scale)  # (H,)

    def coefficients(self):
        """``(r1, r2)`` as the bias uses them: each (H,), clamped, at least float32."""
        r1 = clamp_passing_gradient(at_least_float32(self.r1), FLOOR)
        r2 = clamp_passing_gradient(at_least_float32(self.r2), FLOOR, POWER_CEILING if self.kernel == "power" else None)
        return r1, r2

    def score(self, head: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        """``-r1_h log(1 + r2_h |k|)`` or ``-r1_h |k|^r2_h`` element-wise at ``head``, ``distance`` (long)."""
        r1, r2 = (r[head] for r in self.coefficients())
        k = distance.abs().to(r1.dtype)
        if self.kernel == "log":
            return -r1 * torch.log1p(r2 * k)
        return -r1 * k.pow(r2)  # torch gives pow's exponent a zero gradient where k = 0

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        return table_of(self.score, self.num_heads, distance)  # (H, ...)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, kernel={self.kernel}"
