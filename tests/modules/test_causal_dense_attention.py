import pytest
import torch

from fairseq_urpe.modules.causal_blocks import causal_blocks
from fairseq_urpe.modules.causal_dense_attention import causal_dense_attention

# Blocks as causal_blocks makes them (rows, then the keys 0 .. rows.stop - 1), at sizes a test can afford.
SMALL_BLOCKS = [(slice(0, 3), 3), (slice(3, 5), 5), (slice(5, 7), 7)]


def plain(q, k, v, bias_table, c_table, index, pad):
    """The whole (T, T) matrix by plain autograd: pads at the dtype's floor, -inf right of the diagonal."""
    scores = torch.matmul(q, k.transpose(-1, -2))
    if bias_table is not None:
        scores = scores + bias_table[:, index]
    if pad is not None:
        scores = scores.masked_fill(pad[:, None, None, :], torch.finfo(scores.dtype).min)
    length = q.size(2)
    scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if c_table is not None:
        weights = weights * c_table[:, index]
    return torch.matmul(weights, v)


def inputs(length, dtype, seed, bias, reweight, padding):
    torch.manual_seed(seed)
    batch, heads, dim = 3, 2, 4
    q, k, v = (torch.randn(batch, heads, length, dim, dtype=dtype, requires_grad=True) for _ in range(3))
    keys = torch.arange(length)
    index = keys[:, None] - keys[None, :] + (length - 1)  # (T, T): distance i - j + T - 1
    tables = [torch.empty(heads, 2 * length - 1, dtype=dtype).uniform_(lo, hi).requires_grad_() if on else None
              for on, (lo, hi) in ((bias, (-2, 2)), (reweight, (-1, 2)))]
    pad = None
    if padding:  # example 1: the first two positions are pads (left padding), so row 0 and 1 see only pads
        pad = torch.zeros(batch, length, dtype=torch.bool)
        pad[1, :2] = True
        pad[2, -1] = True
    return q, k, v, tables[0], tables[1], index, pad


@pytest.mark.parametrize("padding", [False, True])
@pytest.mark.parametrize("bias,reweight", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("length,blocks", [(7, SMALL_BLOCKS), (7, None), (300, None)])
def test_matches_plain_autograd_in_float64_forward_and_every_gradient(length, blocks, bias, reweight, padding):
    blocks = blocks or causal_blocks(length)
    q, k, v, b, c, index, pad = inputs(length, torch.float64, length, bias, reweight, padding)
    got = causal_dense_attention(q, k, v, b, c, index, blocks, pad)
    want = plain(q, k, v, b, c, index, pad)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(got)
    params = [t for t in (q, k, v, b, c) if t is not None]
    for g, w in zip(torch.autograd.grad(got, params, upstream), torch.autograd.grad(want, params, upstream)):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_gradients_only_for_what_asks_and_frozen_tables_get_none():
    q, k, v, b, c, index, _ = inputs(7, torch.float64, 1, True, True, False)
    b.requires_grad_(False)
    k.requires_grad_(False)
    got = causal_dense_attention(q, k, v, b, c, index, SMALL_BLOCKS, None)
    want = plain(q, k, v, b, c, index, None)
    upstream = torch.randn_like(got)
    got.backward(upstream)
    grads = [q.grad, v.grad, c.grad]
    q.grad = v.grad = c.grad = None
    want.backward(upstream)
    for g, w in zip(grads, [q.grad, v.grad, c.grad]):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    assert k.grad is None and b.grad is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lower_precision_tracks_float64_at_its_rounding(dtype):
    """q, k, v in ``dtype`` (scores and softmax in float32): within the error of the plain path in ``dtype``."""
    q, k, v, b, c, index, pad = inputs(7, dtype, 2, True, True, True)
    exact = [t.detach().double().requires_grad_() for t in (q, k, v, b, c)]
    want = plain(*exact, index, pad)
    got = causal_dense_attention(q, k, v, b.float(), c.float(), index, SMALL_BLOCKS, pad)
    assert got.dtype == dtype
    bound = {torch.float32: 1e-5, torch.bfloat16: 5e-2}[dtype]
    assert (got.double() - want).abs().max() < bound
    upstream = torch.randn_like(want)
    for g, w in zip(torch.autograd.grad(got, [q, k, v], upstream.to(dtype)), torch.autograd.grad(want, exact[:3], upstream)):
        assert (g.double() - w).abs().max() < 4 * bound


def test_a_second_derivative_is_refused_not_wrong():
    q, k, v, b, c, index, _ = inputs(7, torch.float64, 3, True, True, False)
    out = causal_dense_attention(q, k, v, b, c, index, SMALL_BLOCKS, None)
    (grad_q,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):
        grad_q.sum().backward()


@pytest.mark.parametrize("grad", [False, True])
def test_without_gradients_each_block_is_freed_before_the_next_but_one(grad, monkeypatch):
    """A call without gradients frees each block's softmax once its block is done (the peak is one block, not
    every block's, as an evaluation at long lengths needs); with gradients all are kept for backward."""
    import weakref

    from fairseq_urpe.modules import causal_dense_attention as module

    blocks = [(slice(0, 2), 2), (slice(2, 4), 4), (slice(4, 6), 6), (slice(6, 7), 7)]
    q, k, v, b, c, index, pad = inputs(7, torch.float64, 4, True, True, True)
    made, alive_at_call = [], []
    probs = module._probs

    def recorded(*args):
        alive_at_call.append(sum(ref() is not None for ref in made))
        out = probs(*args)
        made.append(weakref.ref(out))
        return out

    monkeypatch.setattr(module, "_probs", recorded)
    with torch.set_grad_enabled(grad):
        got = causal_dense_attention(q, k, v, b, c, index, blocks, pad)
    torch.testing.assert_close(got, plain(q, k, v, b, c, index, pad), rtol=1e-12, atol=1e-12)
    assert (got.grad_fn is None) != grad
    # at block i the previous block's softmax is still the loop's variable; older ones are gone without gradients
    assert alive_at_call == ([0, 1, 1, 1] if not grad else [0, 1, 2, 3])
