"""The Triton kernel against the dense PyTorch reference, forward and backward, under Triton's interpreter.

Shapes are awkward on purpose: lengths that are not multiples of any tile, head dims 16 and 24 (the
kernel pads 24 to 32), three heads, two sequences; tiles as small as 16 so that several of them meet.
"""

import pytest
import torch

pytest.importorskip("triton")

from fairseq_urpe.kernels.fused_urpe_attention import (  # noqa: E402
    INTERPRETER_BLOCKS,
    fused_causal_urpe_attention,
)
from fairseq_urpe.kernels.reference import causal_urpe_attention_reference  # noqa: E402

TOLERANCE = {torch.float32: dict(rtol=2e-5, atol=2e-5), torch.float64: dict(rtol=1e-10, atol=1e-11)}


def make_inputs(batch, heads, length, head_dim, dtype, bias=True, toeplitz=True, padding=None, seed=0):
    """Random q, k, v (B, H, T, d), tables (H, T) away from their initial 0 and 1, and a padding mask."""
    torch.manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, length, head_dim, dtype=dtype, requires_grad=True) for _ in range(3))
    bias_table = torch.randn(heads, length, dtype=dtype, requires_grad=True) if bias else None
    c_table = torch.empty(heads, length, dtype=dtype).uniform_(-0.5, 2.0).requires_grad_() if toeplitz else None
    mask = None
    if padding == "right":  # fairseq LM batches: the shorter sequence ends in pads
        mask = torch.zeros(batch, length, dtype=torch.bool)
        mask[0, -5:] = True
    elif padding == "left":  # batched generation: the first queries of sequence 1 see only pads
        mask = torch.zeros(batch, length, dtype=torch.bool)
        mask[-1, :3] = True
        mask[0, -2:] = True
    return q, k, v, bias_table, c_table, mask


def assert_matches_reference(inputs, dtype, scale=None, blocks=None):
    q, k, v, bias_table, c_table, mask = inputs
    out = fused_causal_urpe_attention(q, k, v, bias_table, c_table, mask, scale=scale, blocks=blocks)
    want = causal_urpe_attention_reference(q, k, v, bias_table, c_table, mask, scale=scale)
    assert out.shape == want.shape and out.dtype == want.dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out, want, **TOLERANCE[dtype])

    leaves = [("q", q), ("k", k), ("v", v), ("bias table", bias_table), ("Toeplitz table", c_table)]
    leaves = [(name, x) for name, x in leaves if x is not None]
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, [x for _, x in leaves], upstream)
    expected = torch.autograd.grad(want, [x for _, x in leaves], upstream)
    for (name, _), g, e in zip(leaves, got, expected):
        torch.testing.assert_close(g, e, **TOLERANCE[dtype], msg=lambda m: f"gradient of the {name}: {m}")


@pytest.mark.parametrize(
    "dtype,padding",
    [(torch.float64, None), (torch.float64, "right"), (torch.float64, "left"), (torch.float32, "left")],
)
def test_matches_reference_forward_and_backward_with_bias_toeplitz_and_padding(dtype, padding):
    # scale 1/8 is exact in float32, in which Triton passes it, so float64 can be held to 1e-10.
    assert_matches_reference(make_inputs(2, 3, 37, 24, dtype, padding=padding), dtype, scale=0.125)


@pytest.mark.parametrize(
    "bias,toeplitz",
    [(True, False), (False, True), (False, False)],
    ids=["rpe_bias_only", "toeplitz_only", "plain_causal"],
)
def test_matches_reference_without_bias_or_without_toeplitz(bias, toeplitz):
    inputs = make_inputs(2, 3, 21, 16, torch.float64, bias=bias, toeplitz=toeplitz, padding="right", seed=1)
    assert_matches_reference(inputs, torch.float64, scale=0.25)


@pytest.mark.parametrize(
    "blocks",
    [
        dict(table_grads="dkdv", dkdv=(16, 32, 1)),  # table gradients sheared along the keys
        dict(table_grads="dq", dq=(32, 16, 1)),  # ... along the queries
        dict(table_grads="dq", dq=(16, 16, 1), dkdv=(16, 16, 1), forward=(32, 16, 1)),  # square tiles
    ],
    ids=["dkdv_tall_keys", "dq_tall_queries", "square_tiles"],
)
def test_table_gradients_are_right_for_every_tile_shape(blocks):
    inputs = make_inputs(2, 3, 45, 16, torch.float64, padding="left", seed=2)
    assert_matches_reference(inputs, torch.float64, scale=0.25, blocks={**INTERPRETER_BLOCKS, **blocks})


def test_default_scale_single_token_and_tables_longer_than_the_input():
    q, k, v, bias_table, c_table, mask = make_inputs(1, 3, 19, 24, torch.float32, seed=3)
    wide_bias = torch.randn(3, 30, requires_grad=True)  # e.g. a table made for a longer length
    assert_matches_reference((q, k, v, wide_bias, c_table, mask), torch.float32)  # scale 1/sqrt(24)
    grad = torch.autograd.grad(fused_causal_urpe_attention(q, k, v, wide_bias).sum(), wide_bias)[0]
    assert grad.shape == (3, 30) and (grad[:, 19:] == 0).all()
    assert_matches_reference(make_inputs(2, 3, 1, 16, torch.float32, padding=None), torch.float32)


def test_expanded_keys_and_values_shared_by_all_heads():
    """k and v broadcast over heads (overlapping views) still get correct, head-summed gradients."""
    torch.manual_seed(5)
    q = torch.randn(2, 3, 18, 16, dtype=torch.float64, requires_grad=True)
    k1, v1 = (torch.randn(2, 1, 18, 16, dtype=torch.float64, requires_grad=True) for _ in range(2))
    k, v = k1.expand(2, 3, 18, 16), v1.expand(2, 3, 18, 16)
    out = fused_causal_urpe_attention(q, k, v, scale=0.25)
    want = causal_urpe_attention_reference(q, k, v, scale=0.25)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-11)
    got = torch.autograd.grad(out.sum(), (q, k1, v1))
    expected = torch.autograd.grad(want.sum(), (q, k1, v1))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-11)


def test_all_padding_rows_stay_finite_and_match_the_dense_rule():
    """A query whose visible keys are all padding averages them uniformly, as the dense attention does."""
    q, k, v, bias_table, c_table, mask = make_inputs(2, 3, 17, 16, torch.float64, padding="left", seed=4)
    with torch.no_grad():
        out = fused_causal_urpe_attention(q, k, v, bias_table, c_table, mask)
    # Sequence 1, query i < 3: uniform over keys 0..i, reweighted by c(i - j).
    for i in range(3):
        weights = c_table[:, i - torch.arange(i + 1)] / (i + 1)  # (H, i + 1)
        expected = torch.einsum("hj,hjd->hd", weights, v[1, :, : i + 1])
        torch.testing.assert_close(out[1, :, i], expected.detach(), rtol=1e-12, atol=1e-12)


def test_refuses_inputs_it_cannot_compute():
    q = torch.randn(1, 2, 8, 16)
    with pytest.raises(ValueError, match="bias_by_distance must be"):
        fused_causal_urpe_attention(q, q, q, torch.zeros(3, 8))
    with pytest.raises(ValueError, match="c_by_distance must be"):
        fused_causal_urpe_attention(q, q, q, None, torch.ones(2, 7))
    with pytest.raises(ValueError, match="key_padding_mask must be"):
        fused_causal_urpe_attention(q, q, q, key_padding_mask=torch.zeros(2, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="head dim 256"):
        big = torch.randn(1, 1, 4, 256)
        fused_causal_urpe_attention(big, big, big)
    with pytest.raises(ValueError, match="dropout_p must be in"):
        fused_causal_urpe_attention(q, q, q, dropout_p=1.0)
    with pytest.raises(ValueError, match="attention dropout in the kernel supports T <= 131064"):
        long = torch.zeros(1, 1, 1, 16).expand(1, 1, 131065, 16)
        fused_causal_urpe_attention(long, long, long, dropout_p=0.1)
