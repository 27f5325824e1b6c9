"""FIRE's bias of (i, j) against the paper's formula (tests/reference.fire_bias) with a threshold ``L`` inside
the sequence, so that both sides of ``max(L, i)`` are read; its decoding rows; its reach to 32x ``L``; what it
refuses. The family's parametrised tests (test_attention_family.py, tests/models/test_position_family.py)
run it with every C, with and without Q K^T, and incremental decoding."""

import logging
import math

import pytest
import torch

from fairseq_urpe.kernels import dispatch
from fairseq_urpe.modules import FireBias, PositionModules, RelativeMultiheadAttention, ToeplitzReweighting
from tests.models.checks import assert_finite_normalised_distributions
from tests.models.conftest import build_lm, dict_dir  # noqa: F401  (fixtures)
from tests.models.encoder_builders import build as build_encoder
from tests.reference import causal_mask, dense_attention, fire_bias, pair_matrix, position_matrix, unique_index

EMBED, HEADS = 12, 3


def fire_attention(threshold=4.0, seed=0, impl="dense"):
    """FIRE with ``L0 = threshold`` and a per-distance C up to 5, every parameter away from its start."""
    torch.manual_seed(seed)
    attn = RelativeMultiheadAttention(EMBED, HEADS, FireBias(HEADS, threshold=threshold),
                                      ToeplitzReweighting(HEADS, "unique", max_distance=5), attention_impl=impl).double()
    for name, p in attn.named_parameters():
        if name.startswith("toeplitz"):
            torch.nn.init.uniform_(p, -1.5, 2.5)
        elif name not in ("position_bias.c", "position_bias.threshold_scale"):
            torch.nn.init.normal_(p)
    with torch.no_grad():
        attn.position_bias.c.fill_(0.7)
        attn.position_bias.threshold_scale.fill_(1.3)  # L = 5.2: queries 0 .. 5 read L, 6 .. read i
    return attn


def test_the_bias_is_the_papers_formula_on_both_sides_of_the_threshold():
    bias = fire_attention().position_bias
    positions = torch.arange(12)
    got = bias(positions, positions)  # (H, T, S)
    want = pair_matrix(12, 12, HEADS, lambda h, i, j: fire_bias(bias, h, i, j))
    causal = torch.ones(12, 12, dtype=torch.bool).tril()  # future keys read distance 0 here, |i - j| in the paper
    torch.testing.assert_close(got[:, causal], want[:, causal], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(got[:, 11, :6], got[:, 5, :6])  # not a function of i - j alone: the normaliser moves
    # below the threshold the normaliser is psi(L) for every query: there, b is a function of i - j
    torch.testing.assert_close(got[:, 5, 2], got[:, 4, 1], rtol=0, atol=0)


def test_attention_matches_the_dense_reference_in_output_and_gradients_of_every_parameter():
    """q, k, v (through x and the projections), f's weights, c, L's scale and URPE's C, in float64."""
    length, batch = 11, 2
    attn = fire_attention(seed=3)
    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)
    out, _ = attn(x, x, x, attn_mask=causal_mask(length), need_weights=False)
    bias = pair_matrix(length, length, HEADS, lambda h, i, j: fire_bias(attn.position_bias, h, i, j))
    toeplitz = position_matrix(length, length, HEADS, lambda h, d: attn.toeplitz.weight[h, unique_index(d, 5)])
    want = dense_attention(x, attn, bias=bias, toeplitz=toeplitz)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    names, params = zip(*[("x", x), *attn.named_parameters()])
    assert {"position_bias.c", "position_bias.threshold_scale", "position_bias.hidden_weight",
            "position_bias.output_weight", "toeplitz.weight", "q_proj.weight"} <= set(names)
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, params, upstream)
    expected = torch.autograd.grad(want, params, upstream)
    for name, g, e in zip(names, got, expected):
        assert g.abs().sum() > 0, f"no gradient reaches {name}"
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-10, msg=lambda m: f"gradient of {name}: {m}")


def test_a_decoding_step_computes_only_its_query_row_and_matches_the_full_forward():
    attn = fire_attention(seed=5).eval()
    modules, calls = attn.positions, []
    attn.position_bias.register_forward_hook(lambda module, args, out: calls.append((len(args[0]), len(args[1]))))
    full = modules.tables(9, 9, torch.device("cpu"), torch.float64).pair_bias  # (H, 9, 9)
    for i in range(9):
        step = modules.tables(1, i + 1, torch.device("cpu"), torch.float64)
        assert step.pair_bias.shape == (HEADS, 1, i + 1)
        # the same formula on a one-row input: equal up to float64 rounding (BLAS sums by shape)
        torch.testing.assert_close(step.pair_bias[:, 0], full[:, i, : i + 1], rtol=1e-14, atol=1e-14)
    assert calls == [(9, 9)] + [(1, i + 1) for i in range(9)]
    x = torch.randn(9, 2, EMBED, dtype=torch.float64)
    want, _ = attn(x, attn_mask=causal_mask(9), need_weights=False)
    state = {}
    steps = [attn(x[t : t + 1], incremental_state=state, need_weights=False)[0] for t in range(9)]
    torch.testing.assert_close(torch.cat(steps), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("times", [2, 32])
def test_the_normalised_distance_stays_in_zero_one_and_the_bias_finite_far_past_the_threshold(times):
    bias = FireBias(4, threshold=16.0)
    positions = torch.arange(16 * times)
    x = bias.normalised_distance(positions, positions)
    assert x.min() >= 0 and x.max() <= 1 and torch.isfinite(bias(positions, positions)).all()


def test_a_language_model_started_at_its_training_length_gives_finite_distributions_at_2_to_32_times_it(build_lm):
    """L0 set to the training length 16: inputs of 32 .. 512 tokens read the normaliser past it."""
    model, _ = build_lm("transformer_lm_urpe_fire_tiny", tokens_per_sample=16)
    with torch.no_grad():
        model.decoder.position_bias.threshold.fill_(16.0)
    model.eval()
    for times in (2, 8, 32):
        assert_finite_normalised_distributions(model, 16 * times)


@pytest.mark.parametrize("threshold", [0.0, -3.0, math.inf, math.nan])
def test_a_threshold_that_is_not_a_positive_number_is_refused_naming_it(threshold):
    with pytest.raises(ValueError, match=f"FIRE's threshold L0 must be a positive number, got {threshold}"):
        FireBias(4, threshold=threshold)


def test_the_bidirectional_encoder_refuses_fire_naming_the_option():
    with pytest.raises(ValueError, match=r"--rpe-kind fire: FIRE's normalised distance .* is defined for causal "
                                         r"attention .*; this attention is bidirectional"):
        build_encoder("relative_encoder_rpe_tiny", "--rpe-kind", "fire")


@pytest.mark.parametrize("impl", ["fused", "flex"])
def test_fused_and_flex_refuse_a_bias_of_i_and_j_naming_the_flag_at_build_and_per_call(build_lm, impl):
    reason = r"the position bias is a function of the query and key positions \(i, j\), not of i - j alone"
    with pytest.raises(ValueError, match=rf"--rpe-kind fire with --urpe-attention-impl {impl}: {reason}.*"
                                         rf"Use --urpe-attention-impl auto or dense"):
        build_lm("transformer_lm_fire_tiny", "--urpe-attention-impl", impl)
    attn = fire_attention(impl=impl)
    x = torch.randn(5, 1, EMBED, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=rf"--urpe-attention-impl {impl}: {reason}"):
        attn(x, attn_mask=causal_mask(5), need_weights=False)


def test_auto_runs_a_bias_of_i_and_j_densely_and_logs_why(caplog, monkeypatch):
    monkeypatch.setattr(dispatch, "_LOGGED", set())
    auto, dense = fire_attention(seed=2, impl="auto"), fire_attention(seed=2)
    x = torch.randn(7, 2, EMBED, dtype=torch.float64)
    with caplog.at_level(logging.INFO, logger=dispatch.logger.name):
        got, _ = auto(x, attn_mask=causal_mask(7), need_weights=False)
    torch.testing.assert_close(got, dense(x, attn_mask=causal_mask(7), need_weights=False)[0], rtol=0, atol=0)
    assert "attention path: dense (the position bias is a function of the query and key positions (i, j)" in caplog.text


def test_shared_modules_make_one_bias_per_forward_for_every_layer():
    modules = PositionModules(FireBias(HEADS))
    with modules.one_forward():
        first = modules.tables(6, 6, torch.device("cpu"), torch.float32)
        assert modules.tables(6, 6, torch.device("cpu"), torch.float32) is first
    assert first.bias is None and first.pair_bias.shape == (HEADS, 6, 6)
