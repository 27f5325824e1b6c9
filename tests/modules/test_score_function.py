"""Each kind's score function ``score(h, k)`` equals its table ``by_distance`` on a dense grid of heads and
distances, evaluated one element at a time (in shuffled order, and under ``torch.vmap`` as a flex
``score_mod`` calls it), with the same gradients to the module's parameters."""

import pytest
import torch

from fairseq_urpe.modules import (ALiBiBias, KerpleBias, LearnedDistanceBias, LogBias, T5RelativeBias,
                                  ToeplitzReweighting)

HEADS, REACH = 3, 300  # distances -300 .. 300: past every table's clip (128) and T5's last bucket


def kinds():
    return {
        "t5": lambda: T5RelativeBias(HEADS, 32, 128, start="alibi"),
        "t5_bidirectional": lambda: T5RelativeBias(HEADS, 32, 128, bidirectional=True),
        "learned": lambda: LearnedDistanceBias(HEADS, 128, start="alibi"),
        "learned_bidirectional": lambda: LearnedDistanceBias(HEADS, 40, bidirectional=True),
        "alibi": lambda: ALiBiBias(HEADS),
        "alibi_learned": lambda: ALiBiBias(HEADS, learnable=True),
        "log": lambda: LogBias(HEADS),
        "log_fixed": lambda: LogBias(HEADS, learnable=False),
        "kerple_log": lambda: KerpleBias(HEADS, "log"),
        "kerple_power": lambda: KerpleBias(HEADS, "power"),
        "urpe_bucketed": lambda: ToeplitzReweighting(HEADS, "bucketed", 32, 128),
        "urpe_unique": lambda: ToeplitzReweighting(HEADS, "unique", max_distance=200),
    }


def built(name):
    torch.manual_seed(0)
    module = kinds()[name]().double()
    with torch.no_grad():  # away from the starts (flat tables, C = 1), so every entry differs
        for p in module.parameters():
            p.add_(0.3 * torch.rand_like(p))
    return module


@pytest.mark.parametrize("name", list(kinds()))
def test_score_at_each_element_equals_the_table_and_its_gradients(name):
    module = built(name)
    distance = torch.arange(-REACH, REACH + 1)
    table = module.by_distance(distance)  # (H, 2 REACH + 1)
    assert table.shape == (HEADS, distance.numel())
    heads, distances = torch.meshgrid(torch.arange(HEADS), distance, indexing="ij")
    order = torch.randperm(heads.numel())
    elements = module.score(heads.reshape(-1)[order], distances.reshape(-1)[order])  # one value per (h, k)
    got = torch.empty_like(elements).scatter_(0, order, elements).view(HEADS, -1)
    torch.testing.assert_close(got, table, rtol=0, atol=0)

    weights = torch.randn_like(table)
    params = [p for p in module.parameters() if p.requires_grad]
    if params:
        want = torch.autograd.grad((table * weights).sum(), params)
        grads = torch.autograd.grad((got * weights).sum(), params)
        for g, w in zip(grads, want):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["t5", "learned", "alibi_learned", "log", "kerple_log", "kerple_power", "urpe_unique"])
def test_score_runs_under_vmap_one_scalar_pair_at_a_time(name):
    # FlexAttention calls a score_mod under vmap over heads and positions, each call on 0-d tensors.
    module = built(name)
    distance = torch.arange(0, 260)
    table = module.by_distance(distance).detach()
    per_distance = torch.vmap(lambda h: torch.vmap(lambda k: module.score(h, k))(distance))
    got = per_distance(torch.arange(HEADS)).detach()
    torch.testing.assert_close(got, table, rtol=0, atol=0)


def test_matrix_form_is_the_score_at_query_minus_key():
    module = built("kerple_power")
    queries, keys = torch.arange(5, 12), torch.arange(0, 12)
    heads = torch.arange(HEADS)[:, None, None]
    want = module.score(heads, (queries[:, None] - keys[None, :])[None])
    torch.testing.assert_close(module(queries, keys), want, rtol=0, atol=0)
