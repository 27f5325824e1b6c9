"""Two steps of the dense attention as autograd functions, cheaper than autograd of the plain ops.

``expand_by_distance``: a per-distance table ``(H, T + S - 1)`` to its Toeplitz matrix ``(H, T, S)`` by
``index_select``, and back by ``index_add_``: on CPU several times faster than advanced indexing,
whose backward accumulates one element at a time.

``softmax_reweight_values``: URPE's ``(softmax(S) ⊙ C) V`` keeping only ``softmax(S)`` (and C's small
table) for backward. Autograd of the plain ops would also keep ``A ⊙ C`` and ``C`` itself, each as
large as the scores when the batch is 1; backward recomputes them instead:

    A = softmax(S)    W = A ⊙ C    out = W V
    dV = W^T dOut    dW = dOut V^T    dA = dW ⊙ C    dC = sum_batch dW ⊙ A    dS = A ⊙ (dA - rowsum(dA ⊙ A))

Both go over blocks of query rows, so C, the recomputed W and dW exist a block at a time: beside the
saved softmax(S), backward's only (B, H, T, S) tensor is dS, the gradient it returns.
"""

from typing import Optional

import torch


def _expand(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return table.index_select(1, index.reshape(-1)).view(table.size(0), *index.shape)  # (H, T, S)


def _fold(grad: torch.Tensor, index: torch.Tensor, table_shape) -> torch.Tensor:
    """The gradient of ``_expand`` w.r.t. the table: ``grad`` (H, T, S) summed per table entry."""
    flat = grad.reshape(table_shape[0], -1)
    out = grad.new_zeros(table_shape)
    if grad.is_cuda and torch.are_deterministic_algorithms_enabled():  # index_add_ has no deterministic CUDA kernel
        return out.index_put_((torch.arange(table_shape[0], device=grad.device)[:, None], index.reshape(1, -1)),
                              flat, accumulate=True)
    return out.index_add_(1, index.reshape(-1), flat)


def batch_sum(x: torch.Tensor) -> torch.Tensor:
    """``x`` (B, ...) summed over the batch; one example: a view (``sum(0)`` would copy it into fresh memory)."""
    return x[0] if x.size(0) == 1 else x.sum(0)


def scores_grad_(x: torch.Tensor, probs: torch.Tensor, c: Optional[torch.Tensor]) -> torch.Tensor:
    """In place on ``x = dW ⊙ A``: ``dS = X ⊙ C - A rowsum(X ⊙ C)`` (``C = None``: ``X - A rowsum(X)``, softmax's
    backward), the gradient of the scores of ``W = softmax(S) ⊙ C``; ``probs``: A, broadcastable to ``x``."""
    if c is not None:
        x.mul_(c)
    return x.addcmul_(probs, x.sum(-1, keepdim=True), value=-1)


class ExpandByDistance(torch.autograd.Function):
    """``table[:, index]`` for a (H, N) table and a (T, S) long index; use :func:`expand_by_distance`."""

    @staticmethod
    def forward(ctx, table, index):
        ctx.save_for_backward(index)
        ctx.table_shape = table.shape
        return _expand(table, index)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return _fold(grad, index, ctx.table_shape), None


def expand_by_distance(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``(H, T, S)`` matrix ``M[h, i, j] = table[h, index[i, j]]``, differentiable w.r.t. ``table``."""
    if torch.is_grad_enabled() and table.requires_grad:
        return ExpandByDistance.apply(table, index)
    return _expand(table, index)  # no backward to prepare: skip the autograd function's overhead (decoding)


BLOCK_ELEMENTS = 2**22  # rows of (B, H, rows, S) per step of SoftmaxReweightValues: 16 MiB in float32


def row_blocks(scores: torch.Tensor):
    """Row slices of ``scores`` (B, H, T, S) of at most :data:`BLOCK_ELEMENTS` elements (at least one row)."""
    batch, heads, rows, keys = scores.shape
    step = max(1, BLOCK_ELEMENTS // max(1, batch * heads * keys))
    return [slice(start, min(rows, start + step)) for start in range(0, rows, step)]


class SoftmaxReweightValues(torch.autograd.Function):
    """``out = (softmax(scores) ⊙ table[:, index]).to(v.dtype) @ v``; use :func:`softmax_reweight_values`.

    Forward and backward go over blocks of query rows (:func:`row_blocks`), so ``C``, ``W = A ⊙ C`` and ``dW``
    exist one block at a time: beside the saved ``A`` only ``dS``, the gradient it returns, is ``T x S``."""

    @staticmethod
    def forward(ctx, scores, c_table, index, v):
        probs = torch.softmax(scores, dim=-1)  # (B, H, T, S), dtype of scores
        # Each block's product is a tensor of its own, joined after: on CPU a matmul into a row slice of a
        # larger output (or from one) goes matrix by matrix through copies.
        outs = [torch.matmul((probs[:, :, rows] * _expand(c_table, index[rows])).to(v.dtype), v)  # (B, H, rows, d)
                for rows in row_blocks(probs)]
        ctx.save_for_backward(probs, c_table, index, v)
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)  # (B, H, T, d)

    @staticmethod
    def backward(ctx, grad_out):
        probs, c_table, index, v = ctx.saved_tensors
        blocks = row_blocks(probs)
        # one block: dS is made in place on that block's X, as large as the scores; more: each block's X is
        # written into dS by the multiply that makes it (element-wise ops write row slices without copies)
        grad_scores = probs.new_empty(probs.shape) if ctx.needs_input_grad[0] and len(blocks) > 1 else None
        grad_c_table = c_table.new_zeros(c_table.shape) if ctx.needs_input_grad[1] else None
        grad_v = None
        for rows in blocks:
            a, c = probs[:, :, rows], _expand(c_table, index[rows])  # c: (H, rows, S)
            g = grad_out[:, :, rows].contiguous()  # (B, H, rows, d); a strided slice would go matrix by matrix
            if ctx.needs_input_grad[3]:
                part = torch.matmul((a * c).to(v.dtype).transpose(-1, -2), g)  # (B, H, S, d)
                grad_v = part if grad_v is None else grad_v.add_(part)
            # X = dW ⊙ A serves both: dC = sum_batch X, and dS = A ⊙ (dW ⊙ C - D) = X ⊙ C - A D with
            # D = rowsum(X ⊙ C). In place on X: a temporary of this block, or its rows of dS.
            grad_weights = torch.matmul(g, v.transpose(-1, -2)).to(probs.dtype)  # dW: (B, H, rows, S)
            x = grad_weights.mul_(a) if grad_scores is None else torch.mul(grad_weights, a, out=grad_scores[:, :, rows])
            if grad_c_table is not None:
                grad_c_table += _fold(batch_sum(x), index[rows], c_table.shape)
            if ctx.needs_input_grad[0]:
                scores_grad_(x, a, c)
                if grad_scores is None:
                    grad_scores = x
        return grad_scores, grad_c_table, None, grad_v


def softmax_reweight_values(scores: torch.Tensor, c_table: torch.Tensor, index: torch.Tensor, v: torch.Tensor):
    """``(softmax(scores) ⊙ C) V`` with ``C = table[:, index]``: scores (B, H, T, S), table (H, N), index (T, S)
    long, v (B, H, S, d) -> (B, H, T, d)."""
    return SoftmaxReweightValues.apply(scores, c_table, index, v)
