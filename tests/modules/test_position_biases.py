"""The bias kinds of the family (ALiBi, log, learned per distance) against scalar formulas, in float64."""

import math

import pytest
import torch

from fairseq_urpe.modules import (
    ALiBiBias,
    LearnedDistanceBias,
    LogBias,
    T5RelativeBias,
    ToeplitzReweighting,
    alibi_slopes,
)
from tests.reference import position_matrix, press_alibi_slopes, unique_index


def positions(tgt_len, src_len):
    keys = torch.arange(src_len)
    return keys[src_len - tgt_len:], keys


def test_alibi_slopes_for_powers_of_two_are_the_papers_geometric_sequence():
    assert alibi_slopes(8) == [2.0 ** -k for k in range(1, 9)]
    assert alibi_slopes(4) == [2.0 ** -k for k in (2, 4, 6, 8)]
    assert alibi_slopes(1) == [2.0 ** -8]


def test_alibi_slopes_for_other_head_counts_interleave_the_next_power():
    # 6 heads: the 4-head schedule, then slopes 1 and 3 of the 8-head one (2^-1, 2^-3).
    assert alibi_slopes(6) == [2.0 ** -k for k in (2, 4, 6, 8, 1, 3)]
    assert alibi_slopes(3) == [2.0 ** -k for k in (4, 8, 2)]


@pytest.mark.parametrize("heads", list(range(1, 21)) + [24, 32, 40, 64])
def test_alibi_slopes_match_press_et_al_reference_code(heads):
    # Press et al. multiply an inexact root 2^(-8/n) up to n times, which costs a few ulps (1.1e-15
    # relative at 16 heads); ours is 2^(exact exponent). rtol=1e-14 is ten such products, far below any
    # slope difference (the closest two slopes differ by 2^(-8/64) - 1, about 9%).
    torch.testing.assert_close(torch.tensor(alibi_slopes(heads), dtype=torch.float64),
                               torch.tensor(press_alibi_slopes(heads), dtype=torch.float64), rtol=1e-14, atol=0)


def test_alibi_refuses_zero_heads():
    with pytest.raises(ValueError, match="at least one attention head"):
        alibi_slopes(0)


@pytest.mark.parametrize("heads", [3, 8])
@pytest.mark.parametrize("tgt_len,src_len", [(9, 9), (1, 13), (4, 11)])
def test_alibi_bias_is_minus_slope_times_distance(heads, tgt_len, src_len):
    bias = ALiBiBias(heads).double()
    slopes = press_alibi_slopes(heads)
    want = position_matrix(tgt_len, src_len, heads, lambda h, d: torch.tensor(-slopes[h] * abs(d), dtype=torch.float64))
    got = bias(*positions(tgt_len, src_len))
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_fixed_alibi_slopes_have_no_parameters_and_learnable_ones_get_gradients():
    fixed, learnable = ALiBiBias(4), ALiBiBias(4, learnable=True)
    assert list(fixed.parameters()) == [] and fixed.state_dict() == {}
    assert [n for n, _ in learnable.named_parameters()] == ["slopes"]
    learnable.by_distance(torch.arange(5)).sum().backward()
    # d/dm_h sum_k (-m_h k) = -(0 + 1 + 2 + 3 + 4)
    torch.testing.assert_close(learnable.slopes.grad, torch.full((4,), -10.0))


def test_log_bias_is_minus_slope_times_log_one_plus_distance():
    bias = LogBias(3, learnable=True).double()
    with torch.no_grad():
        bias.rho.copy_(torch.tensor([-2.0, 0.5, 3.0]))
    slopes = [math.log(1 + math.exp(r)) for r in (-2.0, 0.5, 3.0)]  # softplus, written out
    want = position_matrix(6, 10, 3, lambda h, d: torch.tensor(-slopes[h] * math.log(1 + abs(d)), dtype=torch.float64))
    torch.testing.assert_close(bias(*positions(6, 10)), want, rtol=1e-14, atol=1e-14)


def test_log_bias_hand_computed_values():
    bias = LogBias(1, learnable=False).double()
    bias.fixed_slopes.fill_(2.0)
    got = bias.by_distance(torch.tensor([0, 1, 3, -3, 7]))[0]
    want = torch.tensor([0.0, -2 * math.log(2), -2 * math.log(4), -2 * math.log(4), -2 * math.log(8)], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-15, atol=0)


def test_log_slopes_start_at_eight_times_alibi_and_stay_positive():
    bias = LogBias(8)
    torch.testing.assert_close(bias.slopes(), torch.tensor([4.0, 2.0, 1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125]))
    with torch.no_grad():
        bias.rho.fill_(-60.0)
    assert (bias.slopes() > 0).all()
    assert LogBias(8, learnable=False).state_dict() == {}


@pytest.mark.parametrize("bidirectional", [False, True])
def test_learned_distance_bias_clips_beyond_max_distance(bidirectional):
    torch.manual_seed(0)
    bias = LearnedDistanceBias(2, max_distance=4, bidirectional=bidirectional).double()
    torch.nn.init.normal_(bias.weight)
    assert bias.weight.shape == (2, 9 if bidirectional else 5)
    want = position_matrix(7, 12, 2, lambda h, d: bias.weight[h, unique_index(d, 4, bidirectional)])
    torch.testing.assert_close(bias(*positions(7, 12)), want, rtol=0, atol=0)
    assert torch.equal(bias.by_distance(torch.tensor([4, 5, 100]))[:, 1:], bias.by_distance(torch.tensor([4, 4])))


@pytest.mark.parametrize("max_distance", [0, -3])
def test_learned_distance_bias_refuses_non_positive_max_distance(max_distance):
    with pytest.raises(ValueError, match=f"^max_distance must be a positive integer, got {max_distance}"):
        LearnedDistanceBias(2, max_distance)  # a module names its argument; the config layer names the option


@pytest.mark.parametrize(
    "module",
    [T5RelativeBias(3, 8, 10), ALiBiBias(3), ALiBiBias(3, learnable=True), LogBias(3), LearnedDistanceBias(3, 5),
     ToeplitzReweighting(3, "bucketed", 8, 10), ToeplitzReweighting(3, "unique", max_distance=5)],
    ids=lambda m: type(m).__name__,
)
def test_distance_table_is_the_first_key_column(module):
    """``by_distance(arange(n))`` is what a fused kernel reads: column j = 0 of the (H, n, n) matrix."""
    torch.manual_seed(1)
    for p in module.parameters():
        torch.nn.init.normal_(p)
    full = module(torch.arange(12), torch.arange(12))
    torch.testing.assert_close(module.by_distance(torch.arange(12)), full[:, :, 0], rtol=0, atol=0)
    # Toeplitz: every diagonal is constant.
    torch.testing.assert_close(full[:, 1:, 1:], full[:, :-1, :-1], rtol=0, atol=0)
