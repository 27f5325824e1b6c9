"""Plain PyTorch reference of the fused kernel's math, with the ``T x T`` matrices written out.

    S = scale Q K^T + B (+ padded keys at the dtype's lowest value, future keys at -inf)
    O = (softmax(S) ⊙ C ⊙ Z) V      B_ij = bias_table[h, min(i - j, n - 1)],  C likewise

An ``(H, n)`` table's last entry holds for every distance past it.

``Z`` is a given attention-dropout mask (0 where dropped, ``1 / (1 - p)`` where kept), or 1.

The same rules as the dense attention module: scores, softmax and ``C`` in at least float32, the
probabilities cast to ``v``'s dtype for the product with ``V``. Imports only torch.
"""

import math
from typing import Optional

import torch


def check_inputs(q, k, v, bias_table=None, c_table=None, key_padding_mask=None) -> None:
    """Raise ``ValueError`` naming the argument unless q, k, v are ``(B, H, T, d)`` of one dtype, the tables
    ``(H, n)``, ``n >= 1``, and the padding mask ``(B, T)``."""
    batch, heads, length, _ = q.shape
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must have one shape (B, H, T, d); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    for name, table in (("bias_table", bias_table), ("c_table", c_table)):
        if table is not None and (table.dim() != 2 or table.size(0) != heads or table.size(1) < 1):
            raise ValueError(f"{name} must be (H={heads}, n >= 1); got {tuple(table.shape)}")
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (batch, length):
        raise ValueError(f"key_padding_mask must be (B={batch}, T={length}); got {tuple(key_padding_mask.shape)}")


def causal_urpe_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                    bias_table: Optional[torch.Tensor] = None, c_table: Optional[torch.Tensor] = None,
                                    key_padding_mask: Optional[torch.Tensor] = None, scale: Optional[float] = None,
                                    dropout_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``(B, H, T, d)`` causal attention with a bias and a Toeplitz reweighting by distance (see module doc);
    ``dropout_mask``: ``Z``, ``(B, H, T, T)``. Inputs as :func:`check_inputs` admits."""
    check_inputs(q, k, v, bias_table, c_table, key_padding_mask)
    length, head_dim = q.size(2), q.size(3)
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    dtype = torch.promote_types(q.dtype, torch.float32)
    scores = torch.matmul(q, k.transpose(2, 3)).to(dtype) * scale  # (B, H, T, T)
    positions = torch.arange(length, device=q.device)
    distance = positions[:, None] - positions[None, :]  # (T, T): i - j
    index = distance.clamp(min=0)  # future keys read entry 0; the causal mask removes them
    if bias_table is not None:
        scores = scores + bias_table.to(dtype)[:, index.clamp(max=bias_table.size(1) - 1)]  # (H, T, T)
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask.to(torch.bool)[:, None, None, :], torch.finfo(dtype).min)
    scores = scores.masked_fill(distance < 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if c_table is not None:
        weights = weights * c_table.to(dtype)[:, index.clamp(max=c_table.size(1) - 1)]
    if dropout_mask is not None:
        weights = weights * dropout_mask.to(dtype)
    return torch.matmul(weights.to(v.dtype), v)  # (B, H, T, d)
