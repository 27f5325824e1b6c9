"""eval.sh and run_baselines.sh: the perplexity tables of the SMOKE models (standard, sliding window,
2L and 4L), the results table of the comparison, and a missing checkpoint."""

import json
import math
import re

import pytest

from fairseq_urpe.fairseq_runs import valid_losses

from .conftest import PIPELINE_ARCHS, SMOKE_MAX_UPDATE, run_recipe, train_inner  # noqa: F401

L = 64  # train.sh's SMOKE block length


def report(recipe_runs, arch):
    return json.loads((recipe_runs.dir / "results" / f"{arch}-smoke" / "eval.json").read_text())


def rows_by(report_):
    return {(r["split"], r["kind"], r["factor"]): r for r in report_["rows"]}


def fairseq_train_last_valid_loss(recipe_runs, arch):
    log = (recipe_runs.dir / "logs" / f"train-{arch}-smoke.log").read_text()
    return valid_losses(log)[-1]


@pytest.mark.e2e
@pytest.mark.parametrize("arch", PIPELINE_ARCHS)
def test_eval_scores_every_token_in_every_setting(recipe_runs, arch):
    recipe_runs.get("baselines").check()
    rep = report(recipe_runs, arch)
    rows = rows_by(rep)
    assert rep["model"]["num_updates"] == SMOKE_MAX_UPDATE and rep["model"]["train_tokens_per_sample"] == L
    assert rep["unit"] == "words" and rep["model"]["params"] > 100_000
    words = json.loads((recipe_runs.dir / "data-bin" / "wikitext-103" / "words.json").read_text())
    expected = {("standard", 1): (L, 0), ("sliding", 1): (L, L - L // 6), ("extrapolation", 2): (2 * L, 0),
                ("extrapolation", 4): (4 * L, 0)}
    assert sorted(rows) == sorted((split, kind, k) for split in ("valid", "test") for kind, k in expected)
    for (split, kind, k), row in rows.items():
        assert (row["tokens_per_sample"], row["context_window"]) == expected[kind, k]
        assert row["status"] == "ok", row
        assert row["tokens"] == row["split_tokens"] == row["words"] == words[split]["words"]  # all scored
        assert row["ppl_word"] == pytest.approx(row["ppl_token"]) == pytest.approx(2 ** row["loss_base2"])
        assert 1 < row["ppl_word"] < 3600 and math.isfinite(row["ppl_word"])  # below uniform over the vocabulary
    # The standard row is fairseq-train's own last validation of the same checkpoint (3 decimals logged).
    assert rows["valid", "standard", 1]["loss_base2"] == pytest.approx(fairseq_train_last_valid_loss(recipe_runs, arch), abs=2e-3)

    table = (recipe_runs.dir / "results" / f"{arch}-smoke" / "eval.md").read_text()
    test_row = rows["test", "standard", 1]
    assert f"| test | non-overlapping | {L} | 0 | {test_row['tokens']} | {test_row['ppl_word']:.2f} |" in table
    sweep = rep["extrapolation"]["ppl_word"]["test"]
    assert f"| test | {sweep['1']:.2f} | {sweep['2']:.2f} | {sweep['4']:.2f} |" in table


@pytest.mark.e2e
def test_run_baselines_ends_in_one_table_of_every_arch(recipe_runs):
    run = recipe_runs.get("baselines").check()
    table = (recipe_runs.dir / "results" / "baselines-smoke.md").read_text()
    records = json.loads((recipe_runs.dir / "results" / "baselines-smoke.json").read_text())
    assert [r["arch"] for r in records] == list(PIPELINE_ARCHS)
    assert table.splitlines()[0] in run.output  # printed at the end
    for record in records:
        rep = report(recipe_runs, record["arch"])
        rows = rows_by(rep)
        assert record["test"] == rows["test", "standard", 1]["ppl_word"]
        assert record["test_4L"] == rows["test", "extrapolation", 4]["ppl_word"]
        assert f"| {record['arch']} | {record['params']:,} | {SMOKE_MAX_UPDATE} | {record['valid']:.2f} | {record['test']:.2f} |" in table
    # The plugin adds its relative-position parameters on top of the same stock layout.
    params = {r["arch"]: r["params"] for r in records}
    assert 0 < params["transformer_lm_urpe_wiki103"] - params["transformer_lm_wiki103"] < 1000


def test_run_baselines_default_archs_are_stock_then_every_kinds_rpe_and_urpe_pair(outside):
    """The default ARCHS (no ARCHS given) come from the plugin's registry; each is a registered arch."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_urpe  # noqa: F401

    run = run_recipe("run_baselines.sh", outside, "wt103", timeout=120, DRY_RUN=1)
    assert run.returncode == 0, run.output
    archs = re.findall(r"^would run: (\S+)$", run.output, flags=re.M)
    pairs = ["rpe", "urpe", "alibi", "urpe_alibi", "log", "urpe_log", "learned", "urpe_learned",
             "rope", "urpe_rope", "nope", "urpe_nope"]
    assert archs == ["transformer_lm_wiki103"] + [f"transformer_lm_{v}_wiki103" for v in pairs]
    assert all(arch in ARCH_MODEL_REGISTRY for arch in archs)
    assert not (outside / "wt103").exists()  # nothing trained, nothing written


def test_missing_checkpoint_fails_naming_it(outside):
    run = run_recipe("eval.sh", outside, "wt103", timeout=60, RUN_NAME="never-trained")
    assert run.returncode != 0
    assert f"eval.sh: error: no checkpoint {outside}/wt103/checkpoints/never-trained/checkpoint_last.pt" in run.output
    assert not (outside / "wt103").exists()
