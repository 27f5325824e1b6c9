"""The dense path's causal attention over query-row blocks as one autograd function, with a hand-written backward.

For blocks of query rows ``r0 .. r1 - 1`` (:mod:`.causal_blocks`), each against the keys it sees (``K = r1``):

    S = Q_r K_K^T + B_r + M_r      B_r = b[:, index[r, :K]] (H, R, K); M_r: pads at the dtype's floor, then
                                   -inf right of the diagonal (only the block's last R x R corner has any)
    A = softmax(S)    W = A ⊙ C_r (URPE; W = A without C)    out_r = W V_K

    dV_K += W^T dO_r    dW = dO_r V_K^T    X = dW ⊙ A    dc += fold(sum_batch X)    (URPE)
    dS = X ⊙ C_r - A rowsum(X ⊙ C_r)      (without C: X - A rowsum(X)), 0 at pads
    db += fold(sum_batch dS)    dQ_r = dS K_K    dK_K += dS^T Q_r

Autograd of the same ops per block slices q, k and v once per block: each slice's backward fills a zero tensor
as large as the whole q (k, v) and the blocks' gradients are then added, 10 fills and 9 additions of
``(B, H, T, d)`` per layer at 4 blocks; here dK and dV are made once and each block adds into its key prefix.
The mask touches only the corner it masks, and ``W`` is recomputed in backward, so only ``A`` is kept per block,
as autograd of RPE keeps it; a call without gradients keeps none (each block's is freed with the block).
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .precision import at_least_float32
from .reweighted_softmax import _expand, _fold, batch_sum, scores_grad_


class CausalDenseAttention(torch.autograd.Function):
    """Use :func:`causal_dense_attention`."""

    @staticmethod
    def forward(ctx, q, k, v, bias_table, c_table, index, blocks, pad):
        probs = []
        out = _forward(q, k, v, bias_table, c_table, index, blocks, pad, probs)
        ctx.blocks = blocks
        ctx.save_for_backward(q, k, v, bias_table, c_table, index, pad, *probs)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        q, k, v, bias_table, c_table, index, pad, *probs = ctx.saved_tensors
        need_q, need_k, need_v, need_b, need_c = ctx.needs_input_grad[:5]
        grad_k = torch.zeros_like(k) if need_k else None
        grad_v = torch.zeros_like(v) if need_v else None
        grad_b = bias_table.new_zeros(bias_table.shape) if need_b else None
        grad_c = c_table.new_zeros(c_table.shape) if need_c else None
        grad_q = []
        space = Workspace(probs[0], ctx.blocks)
        for (rows, keys), a in zip(ctx.blocks, probs):
            g = grad_out[:, :, rows].contiguous()  # (B, H, R, d); a strided slice would go matrix by matrix
            v_k, k_k = v[:, :, :keys], k[:, :, :keys]
            c = None if c_table is None else _expand(c_table, index[rows, :keys])  # (H, R, K)
            if need_v:
                w = a if c is None else torch.mul(a, c, out=space.block(a, rows, keys))
                grad_v[:, :, :keys] += torch.matmul(w.to(v.dtype).transpose(-1, -2), g)
            if not (need_q or need_k or need_b or need_c):
                continue
            dw = space.block(g, rows, keys)  # dW = dO V^T, in the workspace where the dtypes allow
            x = (torch.matmul(g, v_k.transpose(-1, -2)) if dw is None else torch.matmul(g, v_k.transpose(-1, -2), out=dw))
            x = x.to(a.dtype).mul_(a)  # X = dW ⊙ A (B, H, R, K)
            if need_c:
                grad_c += _fold(batch_sum(x), index[rows, :keys], c_table.shape)
            grad_s = scores_grad_(x, a, c)
            if pad is not None:  # the floor is a constant: no gradient (only a row of pads has weight there)
                grad_s.masked_fill_(pad[:, None, None, :keys], 0)
            if need_b:
                grad_b += _fold(batch_sum(grad_s), index[rows, :keys], bias_table.shape)
            grad_s = grad_s.to(q.dtype)
            if need_q:
                grad_q.append(torch.matmul(grad_s, k_k))  # (B, H, R, d)
            if need_k:
                grad_k[:, :, :keys] += torch.matmul(grad_s.transpose(-1, -2), q[:, :, rows])
        if need_q:
            grad_q = grad_q[0] if len(grad_q) == 1 else torch.cat(grad_q, dim=2)
        return grad_q if need_q else None, grad_k, grad_v, grad_b, grad_c, None, None, None


def _forward(q, k, v, bias_table, c_table, index, blocks, pad, probs: Optional[List[Tensor]]) -> Tensor:
    """The forward over the blocks, (B, H, T, d); each block's ``softmax(S)`` appended to ``probs`` (``None``:
    none kept, each freed after its block, as a call without gradients wants)."""
    outs = []
    space = Workspace(q, blocks)
    for rows, keys in blocks:
        a = _probs(q, k, bias_table, index, pad, rows, keys, space)
        w = a if c_table is None else torch.mul(a, _expand(c_table, index[rows, :keys]), out=space.block(a, rows, keys))
        outs.append(torch.matmul(w.to(v.dtype), v[:, :, :keys]))  # (B, H, R, d)
        if probs is not None:
            probs.append(a)
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)


class Workspace:
    """One buffer for the ``(B, H, R, K)`` temporaries of every block of one call (the scores in forward,
    ``A ⊙ C`` and ``dW`` in backward), as large as the largest block: on CPU a fresh tensor of that size per
    block pays its page faults again, which cost more than the arithmetic on it at long lengths."""

    def __init__(self, like: Tensor, blocks: List[Tuple[slice, int]]):
        batch_heads = like.size(0) * like.size(1)
        self.dtype = like.dtype
        self.buffer = like.new_empty(max(batch_heads * (r.stop - r.start) * k for r, k in blocks))

    def block(self, like: Tensor, rows: slice, keys: int) -> Optional[Tensor]:
        """A contiguous ``(B, H, R, K)`` view for a temporary of ``like``'s dtype (``None``: another dtype)."""
        if like.dtype != self.dtype:
            return None
        shape = (like.size(0), like.size(1), rows.stop - rows.start, keys)
        return self.buffer[: shape[0] * shape[1] * shape[2] * shape[3]].view(shape)


def _probs(q: Tensor, k: Tensor, bias_table: Optional[Tensor], index: Tensor, pad: Optional[Tensor], rows: slice,
           keys: int, space: Workspace) -> Tensor:
    """``softmax(S)`` of one block (B, H, R, K), at least float32; S in ``space`` where its dtype is q's."""
    q_r, k_t = q[:, :, rows], k[:, :, :keys].transpose(-1, -2)
    out = space.block(q, rows, keys)
    scores = at_least_float32(torch.matmul(q_r, k_t) if out is None else torch.matmul(q_r, k_t, out=out))  # (B, H, R, K)
    if bias_table is not None:
        scores += _expand(bias_table, index[rows, :keys])
    if pad is not None:  # a finite floor, as the general dense path: a row of padding only stays finite
        scores.masked_fill_(pad[:, None, None, :keys], torch.finfo(scores.dtype).min)
    first = rows.start  # keys first .. keys - 1 face rows first .. keys - 1: -inf above their diagonal
    corner = torch.ones(keys - first, keys - first, dtype=torch.bool, device=scores.device).triu_(1)
    scores[..., first:].masked_fill_(corner, float("-inf"))
    return torch.softmax(scores, dim=-1)


def causal_dense_attention(q: Tensor, k: Tensor, v: Tensor, bias_table: Optional[Tensor], c_table: Optional[Tensor],
                           index: Tensor, blocks: List[Tuple[slice, int]], key_padding_mask: Optional[Tensor]) -> Tensor:
    """``(softmax(Q K^T + B + M) ⊙ C) V`` under fairseq's future mask, over the query-row ``blocks``
    (:func:`~.causal_blocks.causal_blocks`): q (scaled), k, v (B, H, T, d); ``bias_table``, ``c_table``
    (H, 2T - 1) by distance through ``index`` (T, T) long, or ``None``; ``key_padding_mask`` (B, T) true at pads
    or ``None``. Returns (B, H, T, d) in v's dtype; differentiable w.r.t. q, k, v and both tables."""
    pad = None if key_padding_mask is None else key_padding_mask.to(torch.bool)
    if not (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, bias_table, c_table))):
        return _forward(q, k, v, bias_table, c_table, index, blocks, pad, None)  # no block's softmax kept
    return CausalDenseAttention.apply(q, k, v, bias_table, c_table, index, blocks, pad)
