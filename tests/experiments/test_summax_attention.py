"""summax_attention: the lag shares it reads, the forward it replicates, and its tables."""

from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.expressiveness import memory_claims, summax_attention


def test_lag_shares_by_hand():
    """Row 0 splits its weight between lags 3 and 7, row 1 puts it all on lag 2 (its other lag is 5), row 2 has
    g1 = g2 and is left out: both = (1 + 1) / 2, less = (0.5 + 0) / 2, split = 1 / 2."""
    weights = torch.zeros(3, 20)
    weights[0, 19 - 3] = weights[0, 19 - 7] = 0.5
    weights[1, 19 - 2] = 1.0
    weights[2, 19 - 4] = 1.0
    got = summax_attention.lag_shares(weights, torch.tensor([3, 2, 4]), torch.tensor([7, 5, 4]), 8)
    by_lag = got.pop("by_lag")
    assert got == {"both": 1.0, "less": 0.25, "split": 0.5, "rows": 2}
    assert by_lag == {"first": [None, 1.0, 0.5, None, None, None, None, None],  # g1 = 2 (row 1), 3 (row 0)
                      "second": [None, None, None, None, 0.0, None, 0.5, None]}  # g2 = 5 (row 1), 7 (row 0)


def test_memory_batch_lags_are_the_ones_the_target_reads_and_change_nothing_else():
    x, y = memory_claims.memory_batch("summax", 16, 64, 20, np.random.default_rng(5))
    x2, y2, (g1, g2) = memory_claims.memory_batch("summax", 16, 64, 20, np.random.default_rng(5), with_lags=True)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert int(g1.min()) >= 1 and int(g2.max()) <= 16 and bool((g1 != g2).any())
    rows = torch.arange(64)
    assert torch.allclose(x[rows, 19 - g1, 0] + x[rows, 19 - g2, 0], y, atol=1e-6, rtol=0)


@pytest.mark.parametrize("layers", [2, 3])
def test_scored_rows_replicate_the_models_forward(layers):
    from experiments.expressiveness.memory_model import MemoryModel

    model = MemoryModel(4, 32, 1, layers, "learned", True, True, 20, seed=3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # away from the zero-bias start, so rows are not uniform
    x, _ = memory_claims.memory_batch("summax", 16, 8, 20, np.random.default_rng(0))
    y, rows = summax_attention.scored_rows(model, x)
    with torch.no_grad():
        assert torch.equal(y, model(x)[:, -1])
    assert len(rows) == layers
    for w in rows:
        assert w.shape == (8, 20) and torch.allclose(w.sum(-1), torch.ones(8), atol=1e-6)
        assert float(w.std(-1).min()) > 1e-4


def test_smoke_run_writes_tables_that_no_train_rewrites_byte_for_byte(tmp_path):
    assert summax_attention.main(["--smoke", "--steps", "4", "--jobs", "1", "--seeds", "0", "--layers", "2 3",
                                  "--keep-models", str(tmp_path / "models"), "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["summax_L2_seed0.pt", "summax_L3_seed0.pt"]
    first = (tmp_path / "summax_attention.md").read_bytes()
    # a row per model, then a row per layer in the table by lag
    assert first.count(b"\n| 2 | 0 | ") == 1 + 2 and first.count(b"\n| 3 | 0 | ") == 1 + 3
    assert summax_attention.main(["--no-train", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "summax_attention.md").read_bytes() == first
    trained = (tmp_path / "summax_attention.json").read_bytes()
    assert summax_attention.main(["--smoke", "--steps", "4", "--jobs", "1", "--seeds", "0", "--layers", "2 3",
                                  "--from-models", str(tmp_path / "models"), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "summax_attention.json").read_bytes() == trained  # the kept models read the same


def test_no_train_rewrites_the_committed_table_byte_for_byte(tmp_path):
    import shutil

    docs = Path(__file__).resolve().parents[2] / "docs" / "expressiveness" / "summax_36000"
    shutil.copy(docs / "summax_attention.json", tmp_path / "summax_attention.json")
    assert summax_attention.main(["--no-train", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "summax_attention.md").read_bytes() == (docs / "summax_attention.md").read_bytes()
