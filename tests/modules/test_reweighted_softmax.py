import pytest
import torch

from fairseq_urpe.modules.reweighted_softmax import softmax_reweight_values
from tests.modules.test_urpe_attention import EMBED, make_attention
from tests.reference import causal_mask


def plain(scores, c, v):
    return torch.matmul((torch.softmax(scores, dim=-1) * c).to(v.dtype), v)


@pytest.mark.parametrize("batch,c_shape", [(3, "heads"), (1, "heads"), (2, "full")])
def test_matches_plain_autograd_forward_and_backward(batch, c_shape):
    torch.manual_seed(batch)
    scores = torch.randn(batch, 2, 5, 7, dtype=torch.float64, requires_grad=True)
    scores.data[..., -2:] = float("-inf")  # masked keys, as the causal mask leaves them
    shape = (2, 5, 7) if c_shape == "heads" else (batch, 2, 5, 7)
    c = torch.empty(shape, dtype=torch.float64).uniform_(-1, 2).requires_grad_()
    v = torch.randn(batch, 2, 7, 3, dtype=torch.float64, requires_grad=True)
    got, want = softmax_reweight_values(scores, c, v), plain(scores, c, v)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(got)
    for g, w in zip(torch.autograd.grad(got, [scores, c, v], upstream), torch.autograd.grad(want, [scores, c, v], upstream)):
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


def test_urpe_keeps_no_more_for_backward_than_rpe_beyond_its_small_c():
    """URPE keeps softmax(S), as RPE does, not also A ⊙ C: its extra is C (H, T, S), not (B, H, T, S)."""
    length, batch = 32, 4
    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)
    rpe = saved_bytes(make_attention("rpe"), x, causal_mask(length))
    urpe = saved_bytes(make_attention("urpe_bucketed"), x, causal_mask(length))
    heads_matrix = 3 * length * length * 8  # one (H, T, S) float64 tensor
    assert urpe - rpe <= heads_matrix + length * length * 8  # C, and its (T, S) index at most
