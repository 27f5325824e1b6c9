import pytest
import torch

from tests.attention_builders import EMBED, HEADS, make_t5_attention
from tests.capabilities import needs_cpu_float16
from tests.reference import causal_mask, dense_attention, index_matrix, t5_bucket, unique_index


def reference_indices(kind, length, num_buckets=8, max_distance=10):
    bias_index = index_matrix(length, length, lambda d: t5_bucket(d, num_buckets, max_distance))
    toeplitz_index = None
    if kind == "urpe_bucketed":
        toeplitz_index = bias_index
    elif kind == "urpe_unique":
        toeplitz_index = index_matrix(length, length, lambda d: unique_index(d, max_distance))
    return bias_index, toeplitz_index


KINDS = ["rpe", "urpe_bucketed", "urpe_unique"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("length,batch", [(1, 1), (7, 3), (23, 2)])  # 23 > max_distance: clamped and log buckets
def test_matches_dense_reference_forward_and_backward(kind, length, batch):
    attn = make_t5_attention(kind, seed=length)
    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)
    padding = torch.zeros(batch, length, dtype=torch.bool)
    if batch > 1 and length > 2:
        padding[0, -2:] = True  # right padding, as fairseq's LM batches have
    bias_index, toeplitz_index = reference_indices(kind, length)

    out, _ = attn(x, x, x, key_padding_mask=padding, attn_mask=causal_mask(length), need_weights=False)
    want = dense_attention(x, attn, bias_index, toeplitz_index, key_padding_mask=padding)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)

    params = [x] + [p for p in attn.parameters()]
    upstream = torch.randn_like(out)
    got_grads = torch.autograd.grad(out, params, upstream)
    want_grads = torch.autograd.grad(want, params, upstream)
    names = ["x"] + [n for n, _ in attn.named_parameters()]
    assert "position_bias.weight" in names and (kind == "rpe") == ("toeplitz.weight" not in names)
    for name, got, expected in zip(names, got_grads, want_grads):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10, msg=f"gradient of {name}")


def test_urpe_with_all_ones_c_is_exactly_rpe_and_random_c_is_not():
    rpe = make_t5_attention("rpe", seed=3)
    urpe = make_t5_attention("urpe_bucketed", seed=3)
    urpe.load_state_dict({**rpe.state_dict(), "toeplitz.weight": torch.ones_like(urpe.toeplitz.weight)})
    x = torch.randn(9, 2, EMBED, dtype=torch.float64)
    mask = causal_mask(9)
    rpe_out, rpe_weights = rpe(x, x, x, attn_mask=mask, need_head_weights=True)
    urpe_out, urpe_weights = urpe(x, x, x, attn_mask=mask, need_head_weights=True)
    assert torch.equal(rpe_out, urpe_out) and torch.equal(rpe_weights, urpe_weights)

    torch.nn.init.uniform_(urpe.toeplitz.weight, 0.0, 2.0)
    changed, changed_weights = urpe(x, x, x, attn_mask=mask, need_head_weights=True)
    assert (changed - rpe_out).abs().max() > 1e-2
    # RPE rows are stochastic; URPE's reweighted rows are not, which is the point of URPE.
    torch.testing.assert_close(rpe_weights.sum(-1), torch.ones(HEADS, 2, 9, dtype=torch.float64))
    assert (changed_weights.sum(-1) - 1).abs().max() > 1e-2


@pytest.mark.parametrize("kind", KINDS)
def test_incremental_decoding_equals_full_forward_including_beam_reorder(kind):
    attn = make_t5_attention(kind, seed=5).eval()
    length, batch, split = 15, 3, 6
    x = torch.randn(length, batch, EMBED, dtype=torch.float64)
    new_order = torch.tensor([2, 0, 0])  # a beam step: hypotheses reordered and duplicated
    # Reference: the full forward over the sequences as they look after the reorder.
    reordered = torch.cat([x[:split], x[split:, new_order]], dim=0)  # noqa: E203
    prefix_then_reordered = torch.cat([x[:split, new_order], x[split:, new_order]], dim=0)
    full, _ = attn(prefix_then_reordered, None, None, attn_mask=causal_mask(length))

    state = {}
    steps = []
    for t in range(length):
        if t == split:
            attn.reorder_incremental_state(state, new_order)
        step, _ = attn(reordered[t : t + 1], None, None, incremental_state=state)
        steps.append(step)
    torch.testing.assert_close(torch.cat(steps[split:]), full[split:], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.cat(steps[:split])[:, new_order], full[:split], rtol=1e-12, atol=1e-12)


def test_incremental_decoding_keeps_key_padding_of_the_prompt():
    attn = make_t5_attention("urpe_bucketed", seed=8).eval()
    x = torch.randn(6, 2, EMBED, dtype=torch.float64)
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[1, :2] = True  # left padding, as in batched generation
    full, _ = attn(x, None, None, key_padding_mask=padding, attn_mask=causal_mask(6))
    state = {}
    steps = [attn(x[t : t + 1], None, None, key_padding_mask=padding[:, t : t + 1], incremental_state=state)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-12, atol=1e-12)
    assert torch.isfinite(full).all()  # the all-padding first row of sequence 1 stays finite


@pytest.mark.parametrize("kind", KINDS)
def test_inputs_far_beyond_the_bucket_range_stay_finite_and_normalised(kind):
    attn = make_t5_attention(kind, seed=11)
    x = torch.randn(200, 2, EMBED, dtype=torch.float64)  # 20x max_distance
    out, weights = attn(x, x, x, attn_mask=causal_mask(200), need_head_weights=True)
    assert torch.isfinite(out).all()
    if kind == "rpe":
        torch.testing.assert_close(weights.sum(-1), torch.ones(HEADS, 2, 200, dtype=torch.float64))


@needs_cpu_float16
def test_half_precision_adds_bias_and_takes_softmax_in_float32():
    attn = make_t5_attention("urpe_bucketed", seed=2).float()
    with torch.no_grad():
        # Scores near 20000 from q.k plus a bias of 50000 at distance 1: the sum overflows float16 (65504).
        attn.q_proj.bias.fill_(100.0)
        attn.k_proj.bias.fill_(100.0)
        attn.position_bias.weight[:, 1] = 50_000.0
    x = torch.randn(12, 2, EMBED)
    want, want_weights = attn(x, x, x, attn_mask=causal_mask(12, torch.float32), need_head_weights=True)
    half = attn.half()
    out, weights = half(x.half(), None, None, attn_mask=causal_mask(12, torch.float16), need_head_weights=True)
    assert out.dtype == torch.float16 and weights.dtype == torch.float32
    assert torch.isfinite(out).all()
    torch.testing.assert_close(weights, want_weights, rtol=0, atol=5e-3)
    torch.testing.assert_close(out.float(), want, rtol=0, atol=5e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, pytest.param(torch.float16, marks=needs_cpu_float16)])
def test_cpu_autocast_runs_without_overflow(dtype):
    attn = make_t5_attention("urpe_unique", seed=4).float()
    x = torch.randn(16, 2, EMBED, requires_grad=True)
    with torch.autocast("cpu", dtype=dtype):
        out, weights = attn(x, x, x, attn_mask=causal_mask(16, torch.float32), need_weights=True)
    assert out.dtype == dtype and weights.dtype == torch.float32
    out.float().sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters())


def test_attention_dropout_applies_to_the_reweighted_matrix():
    attn = make_t5_attention("urpe_bucketed", seed=6, dropout=0.5).train()
    x = torch.randn(8, 1, EMBED, dtype=torch.float64)
    torch.manual_seed(123)
    out, _ = attn(x, x, x, attn_mask=causal_mask(8))
    # Same dropout draw applied by hand to (A ⊙ C): recompute A ⊙ C in eval mode, then drop.
    _, weights = attn.eval()(x, x, x, attn_mask=causal_mask(8), need_head_weights=True)
    torch.manual_seed(123)
    dropped = torch.nn.functional.dropout(weights[:, 0][None], p=0.5, training=True)  # (1, H, T, S)
    v = attn.v_proj(x[:, 0]).view(8, HEADS, 4).transpose(0, 1)  # (H, S, d)
    by_hand = attn.out_proj((dropped[0] @ v).transpose(0, 1).reshape(8, EMBED))
    torch.testing.assert_close(out[:, 0], by_hand, rtol=1e-12, atol=1e-12)


def test_refuses_cross_attention_inputs():
    attn = make_t5_attention("rpe")
    x, memory = torch.randn(3, 1, EMBED, dtype=torch.float64), torch.randn(5, 1, EMBED, dtype=torch.float64)
    with pytest.raises(ValueError, match="self-attention only"):
        attn(x, memory, memory)
