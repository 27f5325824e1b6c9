"""URPE's ``(softmax(S) ⊙ C) V`` as one autograd step that keeps only ``softmax(S)`` for backward.

Autograd of the three plain ops also keeps ``A ⊙ C`` (B, H, T, S), the one tensor by which URPE's
activation memory would exceed RPE's. Backward recomputes it instead:

    A = softmax(S)    W = A ⊙ C    out = W V
    dV = W^T dOut    dW = dOut V^T    dA = dW ⊙ C    dC = sum_batch dW ⊙ A    dS = A ⊙ (dA - rowsum(dA ⊙ A))

Backward makes two (B, H, T, S) temporaries: the recomputed W (freed at once) and dW, which it turns
into dS in place.
"""

import torch


class SoftmaxReweightValues(torch.autograd.Function):
    """``out = (softmax(scores) ⊙ c).to(v.dtype) @ v``; use :func:`softmax_reweight_values`."""

    @staticmethod
    def forward(ctx, scores, c, v):
        probs = torch.softmax(scores, dim=-1)  # (B, H, T, S), dtype of scores
        out = torch.matmul((probs * c).to(v.dtype), v)  # (B, H, T, d)
        ctx.save_for_backward(probs, c, v)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        probs, c, v = ctx.saved_tensors
        grad_scores = grad_c = grad_v = None
        if ctx.needs_input_grad[2]:
            grad_v = torch.matmul((probs * c).to(v.dtype).transpose(-1, -2), grad_out)  # (B, H, S, d)
        grad_weights = torch.matmul(grad_out, v.transpose(-1, -2)).to(probs.dtype)  # dW: (B, H, T, S)
        # X = dW ⊙ A serves both: dC = sum_batch X, and dS = A ⊙ (dW ⊙ C - D) = X ⊙ C - A D with
        # D = rowsum(X ⊙ C). In place on X, a temporary of this backward.
        x = grad_weights.mul_(probs)
        if ctx.needs_input_grad[1]:
            grad_c = x.sum_to_size(c.shape)  # (H, T, S): summed over the batch
            if grad_c.data_ptr() == x.data_ptr():  # nothing to sum (c as large as the scores): x changes below
                grad_c = grad_c.clone()
        if ctx.needs_input_grad[0]:
            x.mul_(c)
            grad_scores = x.addcmul_(probs, x.sum(-1, keepdim=True), value=-1)
        return grad_scores, grad_c, grad_v


def softmax_reweight_values(scores: torch.Tensor, c: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``(softmax(scores) ⊙ c) V``: scores (B, H, T, S), c broadcastable to it, v (B, H, S, d) -> (B, H, T, d)."""
    return SoftmaxReweightValues.apply(scores, c, v)
