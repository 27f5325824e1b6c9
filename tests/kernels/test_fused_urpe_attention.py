"""The Triton kernel against the dense PyTorch reference, forward and backward, under Triton's interpreter.

Shapes are awkward on purpose: lengths that are not multiples of any tile, head dims 16 and 24 (the
kernel pads 24 to 32), three heads, two sequences; tiles as small as 16 so that several of them meet.
"""

import pytest
import torch

pytest.importorskip("triton")

from fairseq_urpe.kernels import fused_urpe_attention as kernel  # noqa: E402
from fairseq_urpe.kernels.fused_urpe_attention import fused_causal_urpe_attention  # noqa: E402
from fairseq_urpe.kernels.tiles import INTERPRETER_BLOCKS  # noqa: E402
from fairseq_urpe.kernels.reference import causal_urpe_attention_reference  # noqa: E402
from tests.kernels.kernel_inputs import assert_same_gradients, make_inputs  # noqa: E402

TOLERANCE = {torch.float32: dict(rtol=2e-5, atol=2e-5), torch.float64: dict(rtol=1e-10, atol=1e-11)}


def assert_matches_reference(inputs, dtype, scale=None, blocks=None):
    q, k, v, bias_table, c_table, mask = inputs
    out = fused_causal_urpe_attention(q, k, v, bias_table, c_table, mask, scale=scale, blocks=blocks)
    want = causal_urpe_attention_reference(q, k, v, bias_table, c_table, mask, scale=scale)
    assert out.shape == want.shape and out.dtype == want.dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out, want, **TOLERANCE[dtype])

    leaves = [("q", q), ("k", k), ("v", v), ("bias table", bias_table), ("Toeplitz table", c_table)]
    assert_same_gradients(out, want, leaves, **TOLERANCE[dtype])


@pytest.mark.parametrize(
    "dtype,padding",
    [(torch.float64, None), (torch.float64, "right"), (torch.float64, "left"), (torch.float32, "left")],
)
@pytest.mark.every_triton  # also under the second triton (scripts/test.sh): every dtype, with padding
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
        dict(dq=(16, 32, 1)),  # table gradients sheared along the keys
        dict(dq=(32, 16, 1)),  # ... along the queries
        dict(dq=(16, 16, 1), dkdv=(16, 16, 1), forward=(32, 16, 1)),  # square tiles
    ],
    ids=["dq_tall_keys", "dq_tall_queries", "square_tiles"],
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
    with pytest.raises(ValueError, match="bias_table must be"):
        fused_causal_urpe_attention(q, q, q, torch.zeros(3, 8))
    with pytest.raises(ValueError, match="c_table must be"):
        fused_causal_urpe_attention(q, q, q, None, torch.ones(2, 0))  # shorter tables are fine; empty ones not
    with pytest.raises(ValueError, match="c_table must be"):
        fused_causal_urpe_attention(q, q, q, None, torch.ones(2))
    with pytest.raises(ValueError, match="key_padding_mask must be"):
        fused_causal_urpe_attention(q, q, q, key_padding_mask=torch.zeros(2, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="head dim 256"):
        big = torch.randn(1, 1, 4, 256)
        fused_causal_urpe_attention(big, big, big)
    with pytest.raises(ValueError, match="dropout_p must be in"):
        fused_causal_urpe_attention(q, q, q, dropout_p=1.0)
    with pytest.raises(ValueError, match="rounds to dropping everything"):
        fused_causal_urpe_attention(q, q, q, dropout_p=0.999)
    with pytest.raises(ValueError, match=r"0.001 \(--attention-dropout\) would run at 0/256 = 0 .* more than 10%"):
        fused_causal_urpe_attention(q, q, q, dropout_p=0.001)


@pytest.mark.parametrize("length", [64, 37], ids=["multiple_of_16", "odd"])
def test_matches_reference_in_fairseqs_permuted_layout_with_scale_one(length):
    """As the attention module calls it: q, k, v views of (T, B, H d) projections (strides (H d, d, B H d, 1)),
    q scaled beforehand and the kernel's scale 1; a length divisible by 16 is a Triton specialisation of its own."""
    batch, heads, d = 2, 3, 16
    torch.manual_seed(length)

    def projection():
        x = torch.randn(length, batch, heads * d, dtype=torch.float64)
        return x.view(length, batch, heads, d).permute(1, 2, 0, 3).requires_grad_()

    q, k, v = (projection() for _ in range(3))
    assert q.stride() == (heads * d, d, batch * heads * d, 1)
    with torch.no_grad():
        q.mul_(d ** -0.5)
    _, _, _, bias_table, c_table, mask = make_inputs(batch, heads, length, d, torch.float64, padding="left", seed=length)
    assert_matches_reference((q, k, v, bias_table, c_table, mask), torch.float64, scale=1.0)


def test_views_whose_tile_offsets_overflow_int32_are_copied_and_others_are_not():
    """Pointer bases are int64; offsets inside a tile are int32, which holds for any row stride below
    2^31 / 128: beyond that (and for overlapping or gapped views) the wrapper copies."""
    d = 16
    fits = torch.empty_strided((1, 1, 4, d), (0, 0, (2**31 - d) // 127 - 1, 1))  # virtual memory only
    too_far = torch.empty_strided((1, 1, 4, d), (0, 0, (2**31 - d) // 127 + 1, 1))
    assert kernel.tile_offsets_fit(fits) and not kernel.tile_offsets_fit(too_far)
    assert kernel._kernel_layout(too_far).stride() == (4 * d, 4 * d, d, 1)  # a contiguous copy
    permuted = torch.empty(7, 2, 3 * d).view(7, 2, 3, d).permute(1, 2, 0, 3)  # fairseq's layout: used as it is
    assert kernel._kernel_layout(permuted).data_ptr() == permuted.data_ptr()
    expanded = torch.empty(2, 1, 7, d).expand(2, 3, 7, d)  # overlapping: copied
    assert kernel._kernel_layout(expanded).stride() == (3 * 7 * d, 7 * d, d, 1)


def test_pointer_bases_are_64_bit_past_2_31_elements():
    """Head 2 of q, k, v, dO (and of the output and gradients) starts 2 (2^30 + 64) elements after head 0:
    ``h * stride_h`` is past int32 (with int32 products the address wraps negative: a crash or a wrong read).
    The tensors are views into two 8 GiB buffers never touched beyond the few pages the views hold
    (virtual memory only); forward and backward must match the reference on compact copies."""
    batch, heads, length, d = 1, 3, 20, 16
    stride_h = 2**30 + 64
    assert (heads - 1) * stride_h >= 2**31 and stride_h < 2**31  # a product past int32 of int32 arguments
    inputs, outputs = (torch.empty((heads - 1) * stride_h + 8 * length * d, dtype=torch.float32) for _ in range(2))
    strides = (heads * stride_h, stride_h, d, 1)

    def view(buffer, slot):
        return buffer.as_strided((batch, heads, length, d), strides, slot * length * d)

    torch.manual_seed(9)
    q, k, v, grad_out = (view(inputs, slot) for slot in range(4))
    out, dq, dk, dv = (view(outputs, slot) for slot in range(4))
    for x in (q, k, v, grad_out):
        x.copy_(torch.randn(batch, heads, length, d, dtype=torch.float32))
    bias = torch.randn(heads, length, dtype=torch.float32)
    ctab = torch.rand(heads, length, dtype=torch.float32) + 0.5
    row_max, row_sum, delta = (torch.empty(batch * heads, length, dtype=torch.float32) for _ in range(3))
    d_bias, d_c = torch.zeros_like(bias), torch.zeros_like(ctab)
    cfg = dict(INTERPRETER_BLOCKS)
    kernel.launch_forward(q, k, v, bias, ctab, None, out, row_max, row_sum, 0.25, cfg)
    kernel.launch_delta(out, grad_out, delta)
    kernel.launch_backward(q, k, v, bias, ctab, None, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c, 0.25, cfg)

    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, bias, ctab)]
    want = causal_urpe_attention_reference(*leaves[:3], leaves[3], leaves[4], None, 0.25)
    expected = torch.autograd.grad(want, leaves, grad_out.clone())
    for name, got, e in zip(("output", "dq", "dk", "dv", "d_bias", "d_c"), (out, dq, dk, dv, d_bias, d_c),
                            (want,) + expected):
        torch.testing.assert_close(got, e.detach(), **TOLERANCE[torch.float32], msg=lambda m: f"{name}: {m}")
