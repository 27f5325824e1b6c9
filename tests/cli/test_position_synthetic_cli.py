"""The task, criterion and encoder archs train a few updates through the real ``fairseq-train``, which
logs the criterion's accuracy for training and validation."""

import pytest

from fairseq_urpe.fairseq_runs import json_records
from tests.cli.conftest import REPO

# (task, variant): both tasks and both relative variants; APE and NoPE are built and run forward by
# tests/models/test_relative_encoder.py (two more processes here would double this test's time).
RUNS = {("etp", "urpe"), ("pi", "rpe")}
UPDATES = 4


def train_args(task, model, save_dir):
    return [
        "--user-dir", REPO / "fairseq_urpe", "--task", "position_synthetic", "--synthetic-task", task,
        "--vocab-size", 30, "--seq-len", 16, "--train-size", 64, "--valid-size", 24, "--data-seed", 3,
        "--arch", f"relative_encoder_{model}_tiny", "--criterion", "token_accuracy",
        "--optimizer", "adam", "--lr", "1e-3", "--batch-size", 16, "--max-update", UPDATES, "--cpu",
        "--num-workers", 0, "--save-dir", save_dir, "--no-epoch-checkpoints", "--log-format", "json",
        "--log-interval", 1, "--no-progress-bar",
    ] + (["--untie-weights-roberta"] if task == "pi" else [])  # as run_synthetic.py and the authors do


@pytest.fixture(scope="module")
def synthetic_runs(cli, tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    return cli.run_many({key: ("train", train_args(*key, root / "_".join(key))) for key in RUNS})


@pytest.mark.e2e
@pytest.mark.parametrize("task, model", sorted(RUNS))
def test_fairseq_train_logs_token_accuracy_for_train_and_valid(synthetic_runs, task, model):
    result = synthetic_runs[(task, model)].check()
    train = json_records(result.output, "train_inner")
    valid = json_records(result.output, "valid")
    assert [int(r["num_updates"]) for r in train] == list(range(1, UPDATES + 1))
    assert valid, result.tail()
    last = valid[-1]
    assert int(last["valid_n_total"]) == 24 * 16  # every target scored, once
    assert 0 <= float(last["valid_accuracy"]) <= 100
    assert float(last["valid_accuracy"]) == pytest.approx(100 * int(last["valid_n_correct"]) / 24 / 16, abs=1e-3)
