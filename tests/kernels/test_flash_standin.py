"""The performance model's stand-in for SDPA flash (``benchmarks/flash_standin.py``, FlashAttention-2's
shape: one-pass backward, dQ by float32 atomics) is a real causal attention: under the interpreter, its
output and gradients against torch's dense causal attention in float64, with and without dropout (the
mask its kernels regenerate, at the rate asked), at awkward shapes and at the sm_90 tiles."""

import math

import pytest
import torch

pytest.importorskip("triton")
from benchmarks import flash_standin  # noqa: E402  (after conftest.py set TRITON_INTERPRET=1)


def dense_causal(q, k, v, keep=None, keep_scale=1.0):
    """softmax(Q K^T / sqrt(d) + causal mask) ⊙ Z V, in float64."""
    q, k, v = (x.double() for x in (q, k, v))
    length = q.shape[-2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    p = s.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    if keep is not None:
        p = p * keep * keep_scale
    return p @ v


def relative_errors(q, k, v, dropout_p, dtype=torch.float32, blocks=None, seed=7):
    q, k, v = (x.to(dtype).requires_grad_() for x in (q, k, v))
    seed_tensor = torch.tensor([seed], dtype=torch.int64)
    out = flash_standin.flash_standin_attention(q, k, v, dropout_p, seed_tensor, blocks)
    keep = None
    if dropout_p:
        batch, heads, length, _ = q.shape
        keep = flash_standin.dropout_mask(seed_tensor, batch * heads, length, dropout_p)
        keep = keep.view(batch, heads, length, length)
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    want = dense_causal(*leaves, keep, flash_standin.dropout_keep(dropout_p)[1])
    grad = torch.randn(want.shape, dtype=torch.float64)
    got = (out,) + torch.autograd.grad(out, (q, k, v), grad.to(dtype))
    ref = (want,) + torch.autograd.grad(want, leaves, grad)
    return {name: ((x.double() - y).abs().max() / y.abs().max().clamp(min=1.0)).item()  # (T = 1: dQ = dK = 0)
            for name, x, y in zip(("out", "dq", "dk", "dv"), got, ref)}, keep


@pytest.mark.parametrize("length, head_dim, dropout_p", [(1, 16, 0.0), (45, 40, 0.0), (97, 64, 0.0), (45, 40, 0.25),
                                                          (97, 64, 0.1)])
def test_the_standin_matches_dense_causal_attention_in_float32(length, head_dim, dropout_p):
    torch.manual_seed(length)
    q, k, v = (torch.randn(2, 3, length, head_dim) for _ in range(3))
    errors, keep = relative_errors(q, k, v, dropout_p)
    assert max(errors.values()) < 2e-6, errors
    if dropout_p:  # the mask is a dropout at the rate asked (8-bit thresholds: round(256 p) / 256)
        causal = keep.tril()
        rate = 1 - causal.sum().item() / (causal.shape[0] * causal.shape[1] * length * (length + 1) / 2)
        assert abs(rate - round(256 * dropout_p) / 256) < 0.02, rate


def test_the_standin_matches_at_the_sm90_tiles_in_float16():
    """The tiles the compile report prices (sm_90, d64 and d128) under the interpreter in float16 (bf16's
    tl.dot is wrong under triton 3.9's interpreter), within float16 dense attention's own error."""
    torch.manual_seed(0)
    for head_dim in (64, 128):
        q, k, v = (torch.randn(1, 1, 200, head_dim) for _ in range(3))
        blocks = flash_standin.GPU_BLOCKS["sm_90", head_dim]
        for dropout_p in (0.0, 0.1):
            errors, _ = relative_errors(q, k, v, dropout_p, torch.float16, blocks)
            assert max(errors.values()) < 2e-3, (head_dim, dropout_p, errors)
