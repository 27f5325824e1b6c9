"""The benchmark scripts' own pieces: the memory model is causal, the log parser reads fairseq's JSON logs."""

import json

import pytest
import torch

from benchmarks.expressiveness.memory_tasks import MemoryModel
from benchmarks.expressiveness.run_synthetic import PRESETS, parse_log


@pytest.mark.parametrize("kind, dot_product, urpe", [("lin", False, False), ("log", True, True), ("learned", True, False)])
def test_memory_model_output_at_t_ignores_later_inputs(kind, dot_product, urpe):
    torch.manual_seed(0)
    model = MemoryModel(5, 16, 2, 2, kind, dot_product, urpe, ffn=True, max_len=10).eval()
    x = torch.randn(3, 10, 5)
    changed = x.clone()
    changed[:, 6:] = torch.randn(3, 4, 5)
    out, out_changed = model(x), model(changed)
    assert out.shape == (3, 10)
    torch.testing.assert_close(out[:, :6], out_changed[:, :6])
    assert not torch.allclose(out[:, 6:], out_changed[:, 6:])


def test_parse_log_reads_train_inner_and_valid_accuracy(tmp_path):
    log = tmp_path / "run.log"
    train = {"epoch": 1, "loss": "2.1", "accuracy": "40.5", "num_updates": "20"}
    valid = {"epoch": 1, "valid_loss": "1.9", "valid_accuracy": "51.25", "valid_num_updates": "50"}
    log.write_text(
        "fairseq-train ...\n"
        f"2026-01-01 00:00:00 | INFO | train_inner | {json.dumps(train)}\n"
        f"2026-01-01 00:00:01 | INFO | valid | {json.dumps(valid)}\n"
        "2026-01-01 00:00:02 | INFO | fairseq_cli.train | done training\n"
    )
    assert parse_log(log) == {"train": [(20, 40.5)], "valid": [(50, 51.25)]}


def test_paper_preset_is_the_papers_setup():
    assert PRESETS["paper"] == dict(vocab=1000, seq_len=128, batch=128, lr=7e-5, warmup=6000, max_update=40000,
                                    valid_every=2000)
