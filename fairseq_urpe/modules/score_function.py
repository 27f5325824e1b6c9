"""A position module's score function ``f(h, k)`` and the table it makes.

Each kind read by distance writes its formula once, as ``score(head, distance) -> value``: element-wise
over broadcastable ``head`` and ``distance`` (long tensors of any shapes), at least float32. The same
formula makes every table the attention reads:

    dense path, fused kernel   by_distance(distance) = score(h[:, None, ...], distance[None])   (H, ...)
    FlexAttention              the causal table by_distance(0 .. n-1), indexed per score element

``score`` is element-wise in both arguments, so it also runs inside ``torch.vmap`` (as a flex
``score_mod``), one ``(h, k)`` pair per element.
"""

from typing import Callable

import torch
from torch import Tensor


def heads_against(num_heads: int, distance: Tensor) -> Tensor:
    """``(H, 1, ..., 1)`` long head indices ``0 .. H-1`` that broadcast against ``distance`` (...)."""
    return torch.arange(num_heads, device=distance.device).view(-1, *([1] * distance.dim()))


def table_of(score: Callable[[Tensor, Tensor], Tensor], num_heads: int, distance: Tensor) -> Tensor:
    """``score`` at every head and each of ``distance`` (...): ``(H, ...)``."""
    return score(heads_against(num_heads, distance), distance[None])
