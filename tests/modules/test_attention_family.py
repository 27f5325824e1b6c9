"""Every kind of the registry that acts on the scores (each ``--rpe-slopes`` where it reads them) x {RPE,
URPE bucketed, URPE unique} x {dot product, dot-product-free} against the dense reference with the kind's
formula (tests/reference.BIAS_FORMULAS, or PAIR_BIAS_FORMULAS for a bias of (i, j)), forward and backward
in float64, and incremental decoding against the full forward."""

import pytest
import torch

from tests.attention_builders import EMBED, HEADS, SCORES, TOEPLITZ, BiasCase, bias_cases, bias_reference, make_family_attention
from tests.reference import causal_mask, dense_attention, pair_matrix, position_matrix


def reference_matrix(module, value_of, length):
    if value_of is None:
        return None
    return position_matrix(length, length, HEADS, lambda h, d: value_of(module, h, d))


def bias_matrix(module, value_of, length):
    if value_of is None:
        return None
    return pair_matrix(length, length, HEADS, lambda h, i, j: value_of(module, h, i, j))


ALL = [(case, t, s) for case in bias_cases() for t in TOEPLITZ for s in SCORES]


@pytest.mark.parametrize("case,toeplitz_kind,scores", ALL, ids=str)
def test_matches_dense_reference_forward_and_backward(case, toeplitz_kind, scores):
    length, batch = 11, 2  # 11 > MAX_DISTANCE: log buckets and clipped distances are exercised
    attn = make_family_attention(case, toeplitz_kind, SCORES[scores], seed=len(str(case)) + len(toeplitz_kind))
    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)
    padding = torch.zeros(batch, length, dtype=torch.bool)
    padding[0, -3:] = True
    out, weights = attn(x, x, x, key_padding_mask=padding, attn_mask=causal_mask(length), need_head_weights=True)
    bias = bias_matrix(attn.position_bias, bias_reference(case), length)
    toeplitz = reference_matrix(attn.toeplitz, TOEPLITZ[toeplitz_kind][1], length)
    want = dense_attention(x, attn, key_padding_mask=padding, bias=bias, toeplitz=toeplitz, dot_product=SCORES[scores])
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    assert weights.shape == (HEADS, batch, length, length)

    params = [x] + list(attn.parameters())
    names = ["x"] + [n for n, _ in attn.named_parameters()]
    assert ("q_proj.weight" in names) == SCORES[scores] and ("k_proj.weight" in names) == SCORES[scores]
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, params, upstream)
    expected = torch.autograd.grad(want, params, upstream)
    for name, g, e in zip(names, got, expected):
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-10, msg=f"gradient of {name}")


@pytest.mark.parametrize("case,toeplitz_kind,scores", ALL, ids=str)
def test_incremental_decoding_equals_full_forward(case, toeplitz_kind, scores):
    length, batch = 9, 2
    attn = make_family_attention(case, toeplitz_kind, SCORES[scores], seed=7).eval()
    x = torch.randn(length, batch, EMBED, dtype=torch.float64)
    full, _ = attn(x, x, x, attn_mask=causal_mask(length), need_weights=False)
    state, steps = {}, []
    for t in range(length):
        step, _ = attn(x[t : t + 1], None, None, incremental_state=state, need_weights=False)
        steps.append(step)
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-12, atol=1e-12)


def test_dot_product_free_scores_ignore_the_queries():
    """Without QK^T the attention pattern depends on positions only: permuting the other tokens'
    content changes the output only through the values."""
    attn = make_family_attention(BiasCase("alibi", "fixed"), "urpe_bucketed", dot_product=False)
    x = torch.randn(6, 1, EMBED, dtype=torch.float64)
    _, weights = attn(x, x, x, attn_mask=causal_mask(6), need_head_weights=True)
    _, other = attn(torch.randn_like(x), None, None, attn_mask=causal_mask(6), need_head_weights=True)
    assert torch.equal(weights, other)
