"""The study driver: which seeds a cell trains next, training side by side, and a whole study's loop on a toy
study (rounds until each cell has enough live seeds, a record per model, tables written again from the records)."""

import argparse
import json
import math

import pytest

from experiments.expressiveness import verdict_rules as rules
from experiments.study_driver import Cell, Study, seeds_to_train, train_side_by_side


def test_seeds_to_train_takes_fixed_seeds_as_given_and_otherwise_the_next_batch_while_too_few_live():
    records = [{"key": f"c|{s}", "dead": s in (1, 3, 4)} for s in range(5)]
    dead = lambda r: r["dead"]  # noqa: E731
    assert seeds_to_train(records, dead, [0, 7], rules.next_seeds) == [7]
    assert seeds_to_train(records, dead, None, rules.next_seeds) == [5, 6, 7, 8, 9]  # 2 of 5 live
    assert (seeds_to_train(records[:1] + records[2:3] + records[5:], dead, None, rules.next_seeds)
            == rules.next_seeds([0, 2], 2))


@pytest.mark.parametrize("jobs,threads", [(1, False), (2, False), (2, True)])
def test_train_side_by_side_pairs_each_result_with_its_arguments(jobs, threads):
    calls = [(2.0, 3.0), (3.0, 2.0), (5.0, 1.0)]
    assert sorted(train_side_by_side(math.pow, calls, jobs, threads)) == sorted((c, c[0] ** c[1]) for c in calls)


def toy_train(scale, seed):
    """One toy model: seeds 1, 2, 3 of every fifth die where ``scale`` is negative."""
    return {"value": scale * seed, "dead": scale < 0 and seed % 5 in (1, 2, 3), "seconds": 1.0}


def toy_train_together(scale, seeds):
    return [toy_train(scale, seed) for seed in seeds]


@pytest.mark.parametrize("together", [False, True])
def test_study_trains_rounds_until_every_cell_has_enough_live_seeds_and_no_train_writes_the_same_tables(
        tmp_path, together, capsys):
    study = Study("toy", keep=lambda r: True, train=toy_train_together if together else toy_train,
                  record=lambda cell, seed, result: {"cell": cell.about, **result},
                  describe=lambda cell, r: f"  {r['key']}", dead=lambda r: r["dead"], next_seeds=rules.next_seeds,
                  tables=lambda runs: (f"{len(runs)} models", {"keys": sorted(runs)}), together=together)
    cells = [Cell("a|", (1.0,), "a"), Cell("b|", (-1.0,), "b")]
    options = argparse.Namespace(out=str(tmp_path), seeds=None, jobs=1, no_train=False)
    runs = study.run(options, cells)
    # a: the first batch, all live; b: 2 of 5 live, so the second batch too (then 4 of 10)
    assert sorted(runs) == sorted([f"a|{s}" for s in range(5)] + [f"b|{s}" for s in range(10)])
    assert runs["b|9"] == {"key": "b|9", "cell": "b", "value": -9.0, "dead": False, "seconds": 1.0}
    lines = (tmp_path / "toy_runs.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["key"] for line in lines) == sorted(runs)
    assert (tmp_path / "toy.md").read_text() == "15 models\n"
    assert "this invocation: 15 models" in capsys.readouterr().out
    tables = [(tmp_path / name).read_bytes() for name in ("toy.md", "toy.json")]
    study.run(options, cells)  # a rerun trains nothing
    study.run(argparse.Namespace(**{**vars(options), "no_train": True}), cells)
    assert (tmp_path / "toy_runs.jsonl").read_text().splitlines() == lines
    assert [(tmp_path / name).read_bytes() for name in ("toy.md", "toy.json")] == tables
    fixed = study.run(argparse.Namespace(**{**vars(options), "seeds": "3 20"}), cells)  # exactly these seeds
    assert set(fixed) - set(runs) == {"a|20", "b|20"}
