"""URPE through FlexAttention's log-sum-exp, and the ``flex`` path's refusals and logged fallbacks.

The LSE forms (:func:`causal_flex_attention`) against the dense URPE reference in float64: forward and
backward with each flex call replaced by a dense softmax that returns its log-sum-exp (written here), and
forward through flex's own unfused reference (flex has no backward on CPU). The compiled forward of every
kind through the attention module is in test_flex_compiled.py (slow: each compile takes CPU-seconds).
"""

import logging

import pytest
import torch

from fairseq_urpe.kernels import dispatch
from fairseq_urpe.kernels.flex_attention import FlexEngine, causal_flex_attention, shift
from fairseq_urpe.kernels.reference import causal_urpe_attention_reference
from tests.reference import causal_mask

HEADS = 3


def dense_attend(q, k, v, table, mask):
    """One attention call over the keys of ``mask`` with scores ``q k^T + table[h, min(i - j, n - 1)]``:
    ``(O, L)``, ``O = 0`` and ``L = -inf`` on rows without keys. Written from the definitions, with autograd."""
    length = q.size(2)
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    scores = q @ k.transpose(-1, -2)  # (B, H, T, T)
    if table is not None:
        scores = scores + table[:, (i - j).clamp(0, table.size(1) - 1)]
    if mask[0] == "causal":
        keep = i >= j
    else:
        keep = (i >= j) & (i - j < mask[1]) if mask[0] == "band" else i - j >= mask[1]
    scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (B, H, T)
    weights = torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse)[..., None])  # 0 on rows without keys
    return weights @ v, lse


def inputs(length, bias_len, c_len, c_low=-1.5, seed=0, grad=False):
    torch.manual_seed(seed)
    q, k, v = (torch.randn(2, HEADS, length, 8, dtype=torch.float64) for _ in range(3))
    bias = None if bias_len is None else torch.randn(HEADS, bias_len, dtype=torch.float64)
    c = torch.empty(HEADS, c_len, dtype=torch.float64).uniform_(c_low, 2.5)
    tensors = [q, k, v] + [t for t in (bias, c) if t is not None]
    for t in tensors:
        t.requires_grad_(grad)
    return q, k, v, bias, c


# (length, bias entries, c entries, lowest c): c over every distance (shifted form) or constant past a
# distance within the length (band form); c of both signs (k_h > 0) or positive (k_h = 0).
FORMS = {
    "shifted": (37, 12, 37, -1.5),
    "shifted_longer_table": (37, 50, 60, -1.5),
    "shifted_positive_c": (37, 12, 37, 0.5),
    "shifted_without_bias": (37, None, 37, -1.5),
    "band": (37, 12, 9, -1.5),
    "band_bias_longer_than_c": (37, 30, 9, -1.5),
    "band_positive_c": (37, 30, 9, 0.5),
    "band_of_one": (37, 5, 2, -1.5),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_lse_forms_equal_dense_urpe_forward_and_backward_in_float64(form):
    length, bias_len, c_len, c_low = FORMS[form]
    q, k, v, bias, c = inputs(length, bias_len, c_len, c_low, grad=True)
    got = causal_flex_attention(q, k, v, bias, c, dense_attend)
    want = causal_urpe_attention_reference(q, k, v, bias, c, scale=1.0)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    grad_out = torch.randn_like(got)
    leaves = [t for t in (q, k, v, bias, c) if t is not None]
    grads = torch.autograd.grad(got, leaves, grad_out)
    wanted = torch.autograd.grad(want, leaves, grad_out)
    for name, g, w in zip("q k v bias c".split() if bias is not None else "q k v c".split(), grads, wanted):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-11, msg=lambda m: f"d{name}: {m}")


def test_shift_is_zero_for_positive_c_and_lifts_c_above_its_floor_otherwise():
    c = torch.tensor([[1.0, 0.5, 2.0], [1.0, -0.7, 2.0], [0.001, 1.0, 1.0]], dtype=torch.float64)
    k_h = shift(c)
    assert k_h[0] == 0
    torch.testing.assert_close((c + k_h[:, None]).amin(1)[1:], 0.01 * c.abs().amax(1)[1:], rtol=1e-12, atol=0)


UNFUSED = "ignore:flex_attention called without torch.compile"


@pytest.mark.filterwarnings(UNFUSED)
@pytest.mark.parametrize("form", ["shifted", "shifted_positive_c", "band", "band_bias_longer_than_c"])
def test_lse_forms_through_flex_reference_equal_dense_urpe_in_float64(form):
    # flex's unfused reference (not compiled), with the engine's padding of 37 to a multiple of 16
    length, bias_len, c_len, c_low = FORMS[form]
    q, k, v, bias, c = inputs(length, bias_len, c_len, c_low)
    got = FlexEngine(compiled=False, bucket=16)(q, k, v, bias, c)
    want = causal_urpe_attention_reference(q, k, v, bias, c, scale=1.0)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.filterwarnings(UNFUSED)
def test_bias_only_through_flex_reference_equals_dense_in_float64():
    q, k, v, bias, _ = inputs(37, 12, 5)
    got = FlexEngine(compiled=False, bucket=16)(q, k, v, bias)
    torch.testing.assert_close(got, causal_urpe_attention_reference(q, k, v, bias, scale=1.0), rtol=0, atol=1e-12)


# ---- the path's decisions ----

def q_like(grad=False, length=6):
    return torch.zeros(2, HEADS, length, 4, requires_grad=grad)


def decide(impl, q=None, tables=(None, None), dropout=0.0, padding=False, dot_product=True, attn_mask="causal"):
    q = q_like() if q is None else q
    mask = causal_mask(q.size(2), torch.float32) if attn_mask == "causal" else attn_mask
    return dispatch.attention_backend(impl, q, mask, False, False, dropout, dot_product, tables, padding)


def test_flex_refuses_attention_dropout_naming_it():
    with pytest.raises(RuntimeError, match="--urpe-attention-impl flex: flex_attention has no attention dropout.*p = 0.1"):
        decide("flex", dropout=0.1)


def test_flex_refuses_training_on_cpu_and_urpe_on_cpu():
    with pytest.raises(RuntimeError, match="--urpe-attention-impl flex: training on CPU"):
        decide("flex", q=q_like(grad=True))
    with torch.no_grad():
        assert isinstance(decide("flex", q=q_like(grad=True)), dispatch.FlexBackend)  # evaluation: forward only
    with pytest.raises(RuntimeError, match="--urpe-attention-impl flex: URPE's C on CPU"):
        decide("flex", tables=(None, torch.ones(HEADS, 6)))


def test_flex_leaves_padding_masks_and_dot_product_free_to_dense_and_logs_it(caplog, monkeypatch):
    monkeypatch.setattr(dispatch, "_LOGGED", set())  # each line is logged once a process
    with caplog.at_level(logging.INFO, logger=dispatch.logger.name):
        assert decide("flex", padding=True) is None
        assert decide("flex", dot_product=False) is None
        assert decide("flex", attn_mask=None) is None
    logged = caplog.text
    assert "attention path: dense (a key padding mask, which the flex path does not take)" in logged
    assert "attention path: dense (dot-product-free attention" in logged
    assert "attention path: dense (a mask other than fairseq's causal future mask)" in logged


def test_a_shape_past_the_recompile_limit_runs_dense_and_is_logged(caplog, monkeypatch):
    monkeypatch.setattr(dispatch, "_LOGGED", set())  # each line is logged once a process
    backend = dispatch.FlexBackend()
    backend.engine = FlexEngine(compiled=True, shape_limit=2)
    q = torch.zeros(1, HEADS, 6, 4)
    c = torch.ones(HEADS, 6)
    assert backend.engine.admits(q, None, None)  # one shape: bias-free causal call
    with caplog.at_level(logging.WARNING, logger=dispatch.logger.name):
        assert backend.run(q, q, q, None, c) is None  # URPE: two more shapes, past the limit of 2
    assert "would pass torch's recompile limit of 2 compiled shapes" in caplog.text
    assert backend.engine.admits(q, None, None)  # a shape seen before needs no compile
    assert backend.engine.admits(torch.zeros(1, HEADS, 130, 4), None, None)  # another length bucket: the second
    assert not backend.engine.admits(torch.zeros(1, HEADS, 300, 4), None, None)  # a third


def test_lengths_in_one_bucket_share_a_compiled_shape():
    engine = FlexEngine(compiled=True, shape_limit=8)
    assert engine.call_shapes(torch.zeros(1, HEADS, 100, 4), None, None) == \
        engine.call_shapes(torch.zeros(1, HEADS, 128, 4), None, None)
    assert engine.call_shapes(torch.zeros(1, HEADS, 129, 4), None, None) != \
        engine.call_shapes(torch.zeros(1, HEADS, 128, 4), None, None)
    # URPE: the band form's three calls where c turns constant within the length, the shifted form's two otherwise
    assert len(engine.call_shapes(torch.zeros(1, HEADS, 100, 4), None, torch.ones(HEADS, 9))) == 3
    assert len(engine.call_shapes(torch.zeros(1, HEADS, 100, 4), None, torch.ones(HEADS, 100))) == 2


# ---- the option ----

from tests.models.conftest import build_lm, dict_dir  # noqa: E402,F401  (fixtures)


def test_the_option_builds_flex_layers_and_refuses_attention_dropout_naming_both_flags(build_lm):  # noqa: F811
    model, cfg = build_lm("transformer_lm_urpe_tiny", "--urpe-attention-impl", "flex", "--attention-dropout", "0")
    assert cfg.model.urpe_attention_impl == "flex"
    assert {layer.self_attn.attention_impl for layer in model.decoder.layers} == {"flex"}
    with pytest.raises(ValueError, match="--urpe-attention-impl flex: flex_attention has no attention dropout, and "
                                         "--attention-dropout is 0.1"):
        build_lm("transformer_lm_urpe_tiny", "--urpe-attention-impl", "flex", "--attention-dropout", "0.1")


def test_training_a_flex_model_on_cpu_is_refused_naming_the_reason(build_lm):  # noqa: F811
    model, _ = build_lm("transformer_lm_urpe_tiny", "--urpe-attention-impl", "flex", "--attention-dropout", "0")
    model.train()
    with pytest.raises(RuntimeError, match="--urpe-attention-impl flex: training on CPU: flex_attention has no "
                                           "backward on CPU"):
        model(torch.randint(4, 40, (2, 10)))


@pytest.mark.filterwarnings(UNFUSED)
def test_block_masks_are_made_once_per_mask_and_padded_length(monkeypatch):
    from fairseq_urpe.kernels import flex_attention

    made = []
    real = flex_attention.create_block_mask
    monkeypatch.setattr(flex_attention, "create_block_mask", lambda *a, **k: made.append(a[3]) or real(*a, **k))
    engine = FlexEngine(compiled=False, bucket=16)
    q = torch.zeros(1, HEADS, 40, 4)
    for length in (20, 30, 20, 32):  # all pad to 32
        out, lse = engine.attend(q[:, :, :length], q[:, :, :length], q[:, :, :length], None, ("band", 5))
        assert out.shape == (1, HEADS, length, 4) and lse.shape == (1, HEADS, length)
    engine.attend(q[:, :, :33], q[:, :, :33], q[:, :, :33], None, ("band", 5))  # pads to 48
    engine.attend(q[:, :, :20], q[:, :, :20], q[:, :, :20], None, ("causal",))
    assert made == [32, 48, 32]
