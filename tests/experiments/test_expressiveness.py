"""The expressiveness benchmarks' own pieces: the memory model, the log parser and the authors' recipe for the
paper size (Wang & E's experiments: test_wang_e_experiments.py)."""

import json
from argparse import Namespace

import pytest
import torch

from experiments.expressiveness.memory_model import SLOPE_RANGES, MemoryModel
from experiments.expressiveness.run_synthetic import PRESETS, parse_log, summarise, train_command


@pytest.mark.parametrize("kind, dot_product, ffn", [("lin", False, False), ("log", True, True), ("learned", True, True)])
def test_memory_model_output_at_t_ignores_later_inputs(kind, dot_product, ffn):
    model = MemoryModel(5, 16, 2, 2, kind, dot_product, ffn, max_len=10, seed=0).eval()
    x = torch.randn(3, 10, 5)
    changed = x.clone()
    changed[:, 6:] = torch.randn(3, 4, 5)
    out, out_changed = model(x), model(changed)
    assert out.shape == (3, 10)
    torch.testing.assert_close(out[:, :6], out_changed[:, :6])
    assert not torch.allclose(out[:, 6:], out_changed[:, 6:])


def test_memory_model_without_ffn_is_linear_in_its_input():
    model = MemoryModel(2, 8, 2, 1, "log", False, False, max_len=12, seed=0).double().eval()
    x, z = torch.randn(2, 12, 2, dtype=torch.float64), torch.randn(2, 12, 2, dtype=torch.float64)
    zero = model(torch.zeros_like(x))
    torch.testing.assert_close(model(x + 2 * z) - zero, (model(x) - zero) + 2 * (model(z) - zero))


@pytest.mark.parametrize("kind", ["lin", "log"])
def test_slopes_start_neutral_spread_over_the_range_and_set_by_the_seed_alone(kind):
    def slopes(seed):
        bias = MemoryModel(2, 64, 16, 1, kind, False, False, max_len=8, seed=seed).blocks[0].attn.position_bias
        return (bias.slopes if kind == "lin" else bias.slopes()).detach()

    low, high = SLOPE_RANGES[kind]
    assert torch.equal(slopes(3), slopes(3)) and not torch.equal(slopes(3), slopes(4))
    assert slopes(3).min() >= low * 0.999 and slopes(3).max() <= high * 1.001
    assert slopes(3).max() / slopes(3).min() > 4  # spread out, not one value


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


def test_summarise_gives_the_mean_and_sample_std_over_seeds():
    assert summarise([50.0, 52.0, 54.0]) == (52.0, 2.0)
    assert summarise([99.0]) == (99.0, 0.0)


def paper_command(task, gpu=True):
    a = Namespace(**PRESETS["paper"], patience=0, extra="", gpu=gpu)
    return train_command(__import__("pathlib").Path("/out"), task, "urpe", 1, "paper", a)[0]


def test_paper_recipe_is_the_authors_scripts():
    """github.com/lsj2408/URPE simulate_URPE.sh: Adam (0.9, 0.999), eps 1e-8, no clipping, no weight decay,
    polynomial decay from lr 7e-5 after 6000 warm-up updates to 0 at 40000, batch 32 x 4, fp16, 6400 valid
    sequences of length 128, inputs from 980 symbols, the head untied for PI only."""
    cmd = " ".join(paper_command("etp"))
    for flags in ("--adam-betas (0.9, 0.999) --adam-eps 1e-08 --clip-norm 0.0 --weight-decay 0.0",
                  "--lr 7e-05 --lr-scheduler polynomial_decay --total-num-update 40000 --warmup-updates 6000",
                  "--batch-size 32 --update-freq 4", "--max-update 40000", "--vocab-size 980 --seq-len 128",
                  "--valid-size 6400", "--arch relative_encoder_urpe_paper", "--fp16"):
        assert flags in cmd
    assert "--untie-weights-roberta" not in cmd and "--untie-weights-roberta" in paper_command("pi")
    assert "--fp16" not in paper_command("etp", gpu=False)
