"""FIRE's bias (Li et al., ICLR 2024, "Functional Interpolation for Relative Positions Improves Long
Context Transformers"): a learned function of the query and key positions, not of ``i - j`` alone.

    b_h(i, j) = f_theta( psi(i - j) / (psi(max(L, i)) + eps) )_h      psi(x) = log(|c| x + 1),  L = |l| L0

``f_theta: R -> R^H`` is one hidden layer of 32 ReLU units (``Linear(1, 32)``, ReLU, ``Linear(32, H)``,
each with a bias, drawn as ``nn.Linear`` draws them); ``c`` (starting at 0.1) and ``l`` (starting at 1)
are learned scalars; ``L0`` (512) is fixed; ``eps = 1e-6``. This is the authors' published module
(the paper's appendix code): their ``init_c``, ``init_L``, ``L_multiplier``, ``mlp_width`` and ``eps``.
The normaliser grows with the query position ``i`` past ``L``, so ``psi(i - j) / psi(max(L, i))`` stays in
``[0, 1]`` at any length (progressive interpolation): inputs of any length map into the interval the
MLP was trained on.

Departures from the authors' module: a causal query's future keys (``j > i``, which the causal mask
removes) read distance 0 instead of ``|i - j|``; the result is the same wherever the mask lets it through.
FIRE is defined here for causal attention only: with bidirectional attention, ``|i - j|`` can exceed
``max(L, i)`` and the normalised distance leaves ``[0, 1]``, so the module refuses ``bidirectional``.

Call shape: ``bias(query_positions (T,), key_positions (S,)) -> (H, T, S)``, at least float32. A decoding
step asks for its one query row, ``bias(positions[i:i + 1], positions[:i + 1])``: the same numbers as
row ``i`` of the full matrix. The dense attention evaluates the MLP at every ``(i, j)`` of a call: a
``(T, S, 32)`` hidden activation.
"""

import math

import torch
from torch import nn

from .precision import at_least_float32

WIDTH = 32  # f_theta's hidden units (the authors' mlp_width)
START_C = 0.1  # c's start (the authors' init_c)
THRESHOLD = 512.0  # L0: L = |l| L0 starts at 512 (the authors' init_L, a fixed multiplicand of the learned l)
EPS = 1e-6  # added to the normaliser, as the authors do


class FireBias(nn.Module):
    """``b_h(i, j)`` of FIRE for ``num_heads`` heads (see the module doc); ``bidirectional`` attention is refused,
    ``threshold`` is ``L0`` (a positive number), ``width`` f_theta's hidden units.

    Parameters: ``hidden_weight`` (32, 1), ``hidden_bias`` (32,), ``output_weight`` (H, 32), ``output_bias``
    (H,): f_theta; ``c`` (): psi's scale; ``threshold_scale`` (): ``l`` in ``L = |l| L0``. Buffer:
    ``threshold`` (): ``L0``, saved with the weights.
    """

    def __init__(self, num_heads: int, bidirectional: bool = False, threshold: float = THRESHOLD, width: int = WIDTH):
        super().__init__()
        if bidirectional:
            raise ValueError("FIRE's normalised distance psi(i - j) / psi(max(L, i)) is defined for causal attention "
                             "(keys at or before the query); this attention is bidirectional")
        if num_heads <= 0 or width <= 0:
            raise ValueError(f"FIRE needs at least one head and one hidden unit, got {num_heads} heads, width {width}")
        if not (math.isfinite(threshold) and threshold > 0):
            raise ValueError(f"FIRE's threshold L0 must be a positive number, got {threshold}")
        self.num_heads, self.width = num_heads, width
        self.hidden_weight = nn.Parameter(torch.empty(width, 1))  # (32, 1)
        self.hidden_bias = nn.Parameter(torch.empty(width))  # (32,)
        self.output_weight = nn.Parameter(torch.empty(num_heads, width))  # (H, 32)
        self.output_bias = nn.Parameter(torch.empty(num_heads))  # (H,)
        for weight, bias in ((self.hidden_weight, self.hidden_bias), (self.output_weight, self.output_bias)):
            bound = 1 / math.sqrt(weight.size(1))  # nn.Linear's default draw: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
            nn.init.uniform_(weight, -bound, bound)
            nn.init.uniform_(bias, -bound, bound)
        self.c = nn.Parameter(torch.tensor(START_C))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("threshold", torch.tensor(float(threshold)))

    def psi(self, x: torch.Tensor) -> torch.Tensor:
        """``log(|c| x + 1)`` element-wise, ``x >= 0``."""
        return torch.log1p(at_least_float32(self.c).abs() * x)

    def normalised_distance(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """``psi(i - j) / (psi(max(L, i)) + eps)`` (T, S) for query positions (T,) and key positions (S,)
        (long), future keys at distance 0."""
        dtype = at_least_float32(self.c).dtype
        i = query_positions.to(dtype)
        distance = (query_positions[:, None] - key_positions[None, :]).clamp(min=0).to(dtype)  # (T, S)
        threshold = (at_least_float32(self.threshold_scale) * at_least_float32(self.threshold)).abs()  # L
        normaliser = self.psi(torch.where(threshold > i, threshold, i)) + EPS  # (T,): max(L, i), L's gradient where L > i
        return self.psi(distance) / normaliser[:, None]  # (T, S)

    def function(self, x: torch.Tensor) -> torch.Tensor:
        """``f_theta(x)`` (H, ...) at normalised distances ``x`` (...)."""
        hidden = torch.relu(x[..., None] * at_least_float32(self.hidden_weight)[:, 0] + at_least_float32(self.hidden_bias))
        out = hidden @ at_least_float32(self.output_weight).t() + at_least_float32(self.output_bias)  # (..., H)
        return out.movedim(-1, 0)  # (H, ...)

    def forward(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """``b_h(i, j)`` (H, T, S) for query positions (T,) and key positions (S,), long."""
        return self.function(self.normalised_distance(query_positions, key_positions))

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, width={self.width}, threshold={float(self.threshold):g}"
