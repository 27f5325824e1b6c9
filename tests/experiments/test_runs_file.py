"""The runs file: records read back by size and by cell, in seed order."""

import json

from experiments.runs_file import append_run, cell_records, read_runs


def test_runs_file_keeps_the_records_of_this_size_only(tmp_path):
    assert read_runs(tmp_path / "missing.jsonl", lambda r: True) == {}
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [{"key": "a", "steps": 10}, {"key": "b", "steps": 20},
                                                      {"key": "a", "steps": 10, "error": 1.0}]))
    assert read_runs(path, lambda r: r["steps"] == 10) == {"a": {"key": "a", "steps": 10, "error": 1.0}}


def test_runs_file_appends_records_that_read_back_by_cell_in_seed_order(tmp_path):
    path, runs = tmp_path / "runs.jsonl", {}
    with open(path, "w") as log:
        for key in ("a|H=1|10", "a|H=1|2", "a|H=16|0", "a|H=1|x"):
            append_run(log, runs, {"key": key, "steps": 10})
    assert read_runs(path, lambda r: True) == runs
    assert [r["key"] for r in cell_records(runs, "a|H=1|")] == ["a|H=1|2", "a|H=1|10"]  # not H=16, not "x"
