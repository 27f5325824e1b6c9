"""RoPE against a complex-number reference in float64: the rotation, the attention with and without
URPE's C, incremental decoding, and the property that makes it relative."""


import pytest
import torch

from fairseq_urpe.modules import RelativeMultiheadAttention
from fairseq_urpe.modules.position_tables import rotate
from fairseq_urpe.modules.rotary_embedding import RotaryEmbedding
from tests.attention_builders import EMBED, make_rotary_attention
from tests.attention_builders import ROTARY_HEADS as HEADS
from tests.reference import ROTATION_FORMULAS, causal_mask, dense_attention, position_matrix, rope_complex, unique_index


@pytest.mark.parametrize("base", [10000.0, 7.0])
def test_rotation_equals_complex_multiplication_up_to_long_positions(base):
    x = torch.randn(3000, 8, dtype=torch.float64)
    got = rotate(x, RotaryEmbedding(8, base).rotation(torch.arange(3000), torch.float64))
    torch.testing.assert_close(got, rope_complex(x, base), rtol=1e-12, atol=1e-10)


def test_the_rope_kind_of_the_registry_rotates_as_its_reference_formula():
    from fairseq_urpe.models.kind_record import AttentionShape
    from fairseq_urpe.models.position_builders import build_module
    from fairseq_urpe.models.position_kinds import POSITION_KINDS

    rope = build_module(POSITION_KINDS["rope"], AttentionShape(2, 8, False), None)
    x = torch.randn(300, 8, dtype=torch.float64)
    got = rotate(x, rope.rotation(torch.arange(300), torch.float64))
    torch.testing.assert_close(got, ROTATION_FORMULAS["rope"](x), rtol=1e-12, atol=1e-10)


def test_rotated_dot_products_depend_on_the_distance_only():
    rope = RotaryEmbedding(8, base=100.0)
    q, k = torch.randn(1, 8, dtype=torch.float64), torch.randn(1, 8, dtype=torch.float64)
    rotation = lambda p: rope.rotation(torch.tensor([p]), torch.float64)  # noqa: E731
    score = lambda i, j: (rotate(q, rotation(i)) * rotate(k, rotation(j))).sum()  # noqa: E731
    torch.testing.assert_close(score(7, 3), score(1007, 1003), rtol=1e-9, atol=1e-12)
    assert not torch.allclose(score(7, 3), score(7, 4))


@pytest.mark.parametrize("urpe", [False, True], ids=["rope", "urpe_rope"])
def test_matches_the_complex_reference_forward_and_backward(urpe):
    length, batch = 11, 2
    attn = make_rotary_attention(urpe, seed=3, base=50.0)  # a small base: angles up to ~10 rad within 11 positions
    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)
    padding = torch.zeros(batch, length, dtype=torch.bool)
    padding[0, -3:] = True
    out, _ = attn(x, x, x, key_padding_mask=padding, attn_mask=causal_mask(length), need_weights=False)
    c = position_matrix(length, length, HEADS, lambda h, d: attn.toeplitz.weight[h, unique_index(d, 5)]) if urpe else None
    want = dense_attention(x, attn, key_padding_mask=padding, toeplitz=c, rope_base=50.0)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    params, upstream = [x] + list(attn.parameters()), torch.randn_like(out)
    for g, e in zip(torch.autograd.grad(out, params, upstream), torch.autograd.grad(want, params, upstream)):
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-10)


def test_incremental_decoding_keeps_keys_rotated_at_their_own_positions():
    attn = make_rotary_attention(urpe=True, seed=5).eval()
    x = torch.randn(9, 2, EMBED, dtype=torch.float64)
    full, _ = attn(x, x, x, attn_mask=causal_mask(9))
    state = {}
    steps = [attn(x[t : t + 1], None, None, incremental_state=state)[0] for t in range(9)]
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-12, atol=1e-12)
    cached = next(iter(state.values()))["prev_key"]  # (B, H, S, d): each key rotated once, at its position
    k = attn.k_proj(x).view(9, 2, HEADS, EMBED // HEADS).permute(1, 2, 0, 3)
    torch.testing.assert_close(cached, rotate(k, attn.rotary.rotation(torch.arange(9), torch.float64)), rtol=1e-12, atol=1e-12)


def test_odd_head_dims_and_dot_product_free_attention_are_refused():
    with pytest.raises(ValueError, match="head dim .* must be even, got 3"):
        RotaryEmbedding(3)
    with pytest.raises(ValueError, match="needs the dot product"):
        RelativeMultiheadAttention(EMBED, HEADS, rotary=RotaryEmbedding(6), dot_product=False)
