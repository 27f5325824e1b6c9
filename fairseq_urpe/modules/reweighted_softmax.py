"""Two steps of the dense attention as autograd functions, cheaper than autograd of the plain ops.

``expand_by_distance``: a per-distance table ``(H, T + S - 1)`` to its Toeplitz matrix ``(H, T, S)`` by
``index_select``, and back by ``index_add_``: on CPU several times faster than advanced indexing,
whose backward accumulates one element at a time.

``softmax_reweight_values``: URPE's ``(softmax(S) ⊙ C) V`` keeping only ``softmax(S)`` (and C's small
table) for backward. Autograd of the plain ops would also keep ``A ⊙ C`` and ``C`` itself, each as
large as the scores when the batch is 1; backward recomputes them instead:

    A = softmax(S)    W = A ⊙ C    out = W V
    dV = W^T dOut    dW = dOut V^T    dA = dW ⊙ C    dC = sum_batch dW ⊙ A    dS = A ⊙ (dA - rowsum(dA ⊙ A))

Backward makes two (B, H, T, S) temporaries: the recomputed W (freed at once) and dW, which it turns
into dS in place.
"""

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


class SoftmaxReweightValues(torch.autograd.Function):
    """``out = (softmax(scores) ⊙ table[:, index]).to(v.dtype) @ v``; use :func:`softmax_reweight_values`."""

    @staticmethod
    def forward(ctx, scores, c_table, index, v):
        probs = torch.softmax(scores, dim=-1)  # (B, H, T, S), dtype of scores
        out = torch.matmul((probs * _expand(c_table, index)).to(v.dtype), v)  # (B, H, T, d)
        ctx.save_for_backward(probs, c_table, index, v)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        probs, c_table, index, v = ctx.saved_tensors
        c = _expand(c_table, index)  # (H, T, S)
        grad_scores = grad_c_table = grad_v = None
        if ctx.needs_input_grad[3]:
            grad_v = torch.matmul((probs * c).to(v.dtype).transpose(-1, -2), grad_out)  # (B, H, S, d)
        grad_weights = torch.matmul(grad_out, v.transpose(-1, -2)).to(probs.dtype)  # dW: (B, H, T, S)
        # X = dW ⊙ A serves both: dC = sum_batch X, and dS = A ⊙ (dW ⊙ C - D) = X ⊙ C - A D with
        # D = rowsum(X ⊙ C). In place on X, a temporary of this backward.
        x = grad_weights.mul_(probs)
        if ctx.needs_input_grad[1]:
            grad_c_table = _fold(x.sum(0), index, c_table.shape)
        if ctx.needs_input_grad[0]:
            x.mul_(c)
            grad_scores = x.addcmul_(probs, x.sum(-1, keepdim=True), value=-1)
        return grad_scores, grad_c_table, None, grad_v


def softmax_reweight_values(scores: torch.Tensor, c_table: torch.Tensor, index: torch.Tensor, v: torch.Tensor):
    """``(softmax(scores) ⊙ C) V`` with ``C = table[:, index]``: scores (B, H, T, S), table (H, N), index (T, S)
    long, v (B, H, S, d) -> (B, H, T, d)."""
    return SoftmaxReweightValues.apply(scores, c_table, index, v)
