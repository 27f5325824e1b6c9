"""The call shape of the position modules read by distance (the biases b, URPE's c): a per-head function of ``i - j``."""

import torch
from torch import nn


class RelativePositionFunction(nn.Module):
    """``f_h(i - j)`` for every query/key pair.

    ``forward(query_positions (T,), key_positions (S,)) -> (H, T, S)``, at least float32. Subclasses
    define ``by_distance(distance (...) long) -> (H, ...)``; ``by_distance(torch.arange(n))`` is the
    ``(H, n)`` table of causal distances ``0 .. n-1``; attention reads these tables
    (:class:`~fairseq_urpe.modules.position_tables.PositionTables`), not the ``(H, T, S)`` matrices.
    """

    def forward(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        return self.by_distance(query_positions[:, None] - key_positions[None, :])  # (H, T, S)

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
