"""Rotary position embedding, RoPE (Su et al., *RoFormer*, 2021): q and k rotated by their positions."""

from typing import Tuple

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    """Pairs ``(x_m, x_{m + d/2})`` of each head's query and key at position ``p`` turn by the angle
    ``p θ_m``, ``θ_m = base^(-2m/d)``, ``m = 0 .. d/2 - 1``, so ``q_i · k_j`` depends on ``i - j`` only.

    ``rotation(positions (T,), dtype) -> (cos, sin)``, each ``(T, d)`` (both halves of the last dim hold
    the pair's angle), for :func:`~fairseq_urpe.modules.position_tables.rotate`. Angles are computed in
    float64 from the integer positions, then cast, so long positions keep their precision. No parameters.
    """

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embeddings pair the head's dimensions: the head dim (embed dim / heads) must be "
                             f"even, got {head_dim}")
        self.head_dim, self.base = head_dim, base

    def rotation(self, positions: torch.Tensor, dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
        pair = torch.arange(self.head_dim // 2, device=positions.device, dtype=torch.float64)
        angles = positions.to(torch.float64)[:, None] * self.base ** (-2 * pair / self.head_dim)  # (T, d/2)
        angles = torch.cat((angles, angles), dim=-1)  # (T, d)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}"
