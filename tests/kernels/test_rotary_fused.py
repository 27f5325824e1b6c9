"""RoPE on the fused path: the kernel is fed q and k rotated at their positions (under Triton's interpreter)."""

import pytest
import torch

pytest.importorskip("triton")

from fairseq_urpe.kernels import dispatch  # noqa: E402
from tests.attention_builders import EMBED, make_rotary_attention  # noqa: E402
from tests.reference import causal_mask  # noqa: E402


def test_fused_kernel_takes_the_rotated_queries_and_keys(monkeypatch):
    calls = []
    run = dispatch.FusedBackend.run
    monkeypatch.setattr(dispatch.FusedBackend, "run", lambda *args, **kwargs: calls.append(1) or run(*args, **kwargs))
    fused, dense = make_rotary_attention(urpe=True, seed=9), make_rotary_attention(urpe=True, seed=9)
    fused.attention_impl, dense.attention_impl = "fused", "dense"
    x = torch.randn(13, 2, EMBED, dtype=torch.float64, requires_grad=True)
    results = []
    for attn in (fused, dense):
        out = attn(x, x, x, attn_mask=causal_mask(13), need_weights=False)[0]
        results.append((out, torch.autograd.grad(out.sum(), [x] + list(attn.parameters()))))
    assert len(calls) == 1
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-10, atol=1e-10)
    for got, want in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
