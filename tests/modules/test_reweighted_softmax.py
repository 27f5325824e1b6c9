import pytest
import torch

from fairseq_urpe.modules.reweighted_softmax import expand_by_distance, softmax_reweight_values
from tests.attention_builders import EMBED, make_t5_attention
from tests.reference import causal_mask


def distance_index(tgt_len, src_len):
    """(T, S) index of i - j + S - 1 for queries at the last T of S positions."""
    keys = torch.arange(src_len)
    return keys[src_len - tgt_len :, None] - keys[None, :] + (src_len - 1)


def test_expand_by_distance_equals_advanced_indexing_forward_and_backward():
    table = torch.randn(3, 2 * 7 - 1, dtype=torch.float64, requires_grad=True)
    index = distance_index(5, 7)
    got, want = expand_by_distance(table, index), table[:, index]
    assert torch.equal(got, want)
    upstream = torch.randn_like(got)
    torch.testing.assert_close(torch.autograd.grad(got, table, upstream)[0], torch.autograd.grad(want, table, upstream)[0],
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("block_elements", [2**22, 7 * 3 * 2, 1])  # one block; two rows; one row per block
@pytest.mark.parametrize("batch", [3, 1])
def test_softmax_reweight_values_matches_plain_autograd_forward_and_backward(batch, block_elements, monkeypatch):
    monkeypatch.setattr("fairseq_urpe.modules.reweighted_softmax.BLOCK_ELEMENTS", block_elements)
    torch.manual_seed(batch)
    scores = torch.randn(batch, 2, 5, 7, dtype=torch.float64)
    scores[..., -2:] = float("-inf")  # masked keys, as the causal mask leaves them
    scores.requires_grad_()
    table = torch.empty(2, 13, dtype=torch.float64).uniform_(-1, 2).requires_grad_()
    index = distance_index(5, 7)
    v = torch.randn(batch, 2, 7, 3, dtype=torch.float64, requires_grad=True)
    got = softmax_reweight_values(scores, table, index, v)
    want = torch.matmul(torch.softmax(scores, dim=-1) * table[:, index], v)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(got)
    for g, w in zip(torch.autograd.grad(got, [scores, table, v], upstream),
                    torch.autograd.grad(want, [scores, table, v], upstream)):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def saved_bytes(attn, x, mask):
    """Bytes of the distinct tensors autograd keeps for backward during one forward of ``attn``."""
    saved = {}

    def pack(t):
        saved[(t.data_ptr(), t.numel(), t.dtype)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attn(x, x, x, attn_mask=mask, need_weights=False)
    return sum(saved.values())


def test_urpe_keeps_what_rpe_keeps_for_backward_plus_only_a_small_table():
    """URPE keeps softmax(S), as RPE does, not also A ⊙ C or C: its extra is O(S), c's table by distance."""
    length, batch = 32, 1  # batch 1: an (H, T, S) C would be as large as the scores
    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)
    rpe = saved_bytes(make_t5_attention("rpe"), x, causal_mask(length))
    urpe = saved_bytes(make_t5_attention("urpe_bucketed"), x, causal_mask(length))
    assert urpe - rpe <= (3 + 1) * (2 * length - 1) * 8  # c's (H, T + S - 1) float64 table and its bucket index
