"""Causal blocks (fairseq_urpe/modules/causal_blocks.py): under the future mask the dense attention runs in
blocks of query rows, each against the keys it sees. With blocks of 4 rows (the inputs here are shorter
than the 128 rows a block has at least), a bias by distance (T5: its matrix built per block) and one of
(i, j) (FIRE: sliced per block) x {RPE, URPE bucketed, URPE unique} x {dot product, dot-product-free}, and
RoPE with and without C, match the dense float64 reference in output and in every
gradient, with padding; the same with the URPE path that keeps only softmax(S) for backward."""

import pytest
import torch

from fairseq_urpe.modules import causal_blocks as causal_blocks_module
from fairseq_urpe.modules import relative_multihead_attention as attention_module
from fairseq_urpe.modules.causal_blocks import causal_blocks
from fairseq_urpe.modules.relative_multihead_attention import RelativeMultiheadAttention
from tests.attention_builders import (
    EMBED, HEADS, ROTARY_HEADS, SCORES, TOEPLITZ, bias_cases, bias_reference, make_family_attention, make_rotary_attention,
)
from tests.reference import causal_mask, dense_attention, pair_matrix, position_matrix, unique_index

# a bias read by distance (its matrix built per block) and one of (i, j) (FIRE's, sliced per block)
CASES = [case for case in bias_cases() if case.kind in ("t5", "fire")]
ALL = [(case, t, s) for case in CASES for t in TOEPLITZ for s in SCORES]


@pytest.fixture
def blocks_of_four(monkeypatch):
    """Blocks of 4 rows, and a record of the (rows, keys) each dense block computes."""
    monkeypatch.setattr(causal_blocks_module, "MIN_ROWS", 4)
    seen = []
    block = RelativeMultiheadAttention.dense_block

    def recorded(self, q, k, v, tables, key_padding_mask, attn_mask, rows, keys, *rest):
        seen.append((rows, keys))
        return block(self, q, k, v, tables, key_padding_mask, attn_mask, rows, keys, *rest)

    monkeypatch.setattr(RelativeMultiheadAttention, "dense_block", recorded)
    whole = attention_module.causal_dense_attention  # the blocks of dot-product training calls, in one function

    def recorded_whole(q, k, v, bias_table, c_table, index, blocks, *rest):
        seen.extend(blocks)
        return whole(q, k, v, bias_table, c_table, index, blocks, *rest)

    monkeypatch.setattr(attention_module, "causal_dense_attention", recorded_whole)
    return seen


def test_blocks_cover_every_row_once_and_read_the_keys_up_to_their_last_row():
    for length in (1, 127, 128, 129, 512, 1000, 2048, 5000):
        blocks = causal_blocks(length)
        rows = [r for block, _ in blocks for r in range(length)[block]]
        assert rows == list(range(length))
        assert all(keys == range(length)[block][-1] + 1 for block, keys in blocks)
    assert causal_blocks(128) == [(slice(0, 128), 128)]  # up to MIN_ROWS: one block, as without blocks
    assert len(causal_blocks(512)) == 4 and len(causal_blocks(2048)) == 8 and len(causal_blocks(5000)) == 8


def check_against_reference(attn, want_of, length, seen):
    batch = 2
    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)
    padding = torch.zeros(batch, length, dtype=torch.bool)
    padding[0, -3:] = True
    out, weights = attn(x, x, x, key_padding_mask=padding, attn_mask=causal_mask(length), need_weights=False)
    assert weights is None
    assert [keys for _, keys in seen] == [4, 8, length]  # three blocks, each with the keys it sees
    want = want_of(x, padding)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    params = [x] + list(attn.parameters())
    names = ["x"] + [n for n, _ in attn.named_parameters()]
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, params, upstream)
    expected = torch.autograd.grad(want, params, upstream)
    for name, g, e in zip(names, got, expected):
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-10, msg=f"gradient of {name}")


@pytest.mark.parametrize("case,toeplitz_kind,scores", ALL, ids=str)
def test_blocks_match_the_dense_reference_forward_and_backward(case, toeplitz_kind, scores, blocks_of_four):
    length = 11  # blocks of 4, 4 and 3 rows
    attn = make_family_attention(case, toeplitz_kind, SCORES[scores], seed=len(str(case)) + 3)
    value_of, toeplitz_of = bias_reference(case), TOEPLITZ[toeplitz_kind][1]
    bias = None if value_of is None else pair_matrix(
        length, length, HEADS, lambda h, i, j: value_of(attn.position_bias, h, i, j))
    toeplitz = None if toeplitz_of is None else position_matrix(
        length, length, HEADS, lambda h, d: toeplitz_of(attn.toeplitz, h, d))

    def want_of(x, padding):
        return dense_attention(x, attn, key_padding_mask=padding, bias=bias, toeplitz=toeplitz, dot_product=SCORES[scores])

    check_against_reference(attn, want_of, length, blocks_of_four)


@pytest.mark.parametrize("urpe", [False, True], ids=["rope", "urpe_rope"])
def test_rotary_blocks_match_the_reference(urpe, blocks_of_four):
    length = 11
    attn = make_rotary_attention(urpe, seed=5, base=50.0)
    c = position_matrix(length, length, ROTARY_HEADS, lambda h, d: attn.toeplitz.weight[h, unique_index(d, 5)]) if urpe else None

    def want_of(x, padding):
        return dense_attention(x, attn, key_padding_mask=padding, toeplitz=c, rope_base=50.0)

    check_against_reference(attn, want_of, length, blocks_of_four)


def test_other_masks_the_weights_and_decoding_run_one_block(blocks_of_four):
    length = 11
    attn = make_family_attention(bias_cases()[0], "urpe_bucketed", True, seed=1)
    x = torch.randn(length, 1, EMBED, dtype=torch.float64)
    window = causal_mask(length).masked_fill(torch.ones(length, length, dtype=torch.bool).tril(-4), float("-inf"))
    attn(x, x, x, attn_mask=window, need_weights=False)
    attn(x, x, x, attn_mask=causal_mask(length), need_weights=True)
    attn(x, x, x, attn_mask=None, need_weights=False)
    state = {}
    for t in range(3):
        attn(x[t : t + 1], None, None, incremental_state=state, need_weights=False)
    assert blocks_of_four == [(slice(None), None)] * 6
