"""The expressiveness benchmarks' own pieces: the memory model, the rate read-outs, the log parser, the
authors' recipe for the paper size, and the memory experiments end to end in their smoke mode."""

import json
import math
from argparse import Namespace

import pytest
import torch

from experiments.expressiveness import memory_experiments as memory_tasks
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


def test_heads_needed_interpolates_log_log_between_grid_points():
    assert memory_tasks.heads_needed([1, 2, 4], [0.5, 0.2, 0.05], 0.3) == pytest.approx(
        math.exp(math.log(2) * (math.log(0.5) - math.log(0.3)) / (math.log(0.5) - math.log(0.2))))
    assert memory_tasks.heads_needed([1, 2, 4], [0.05, 0.04, 0.03], 0.1) == 1.0
    assert memory_tasks.heads_needed([1, 2, 4], [0.9, 0.8, 0.7], 0.1) is None


def test_fit_slope_recovers_a_power_law_and_skips_lengths_never_reached():
    assert memory_tasks.fit_slope([4, 8, 16, 32], [2.0, 4.0, 8.0, None]) == pytest.approx(1.0)
    assert memory_tasks.fit_slope([4, 8], [2.0, None]) is None


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


def test_memory_experiments_smoke_mode_writes_tables_and_plots(tmp_path):
    args = ["--smoke", "--only", "rate dpf depth", "--jobs", "1", "--seeds", "0 1", "--out", str(tmp_path)]
    memory_tasks.main(args)
    results = json.loads((tmp_path / "memory_results.json").read_text())["results"]
    assert set(results) == {"rate", "dpf", "depth"}
    cell = results["rate"]["log-RPE"]["cells"]["2"]["1"]
    assert len(cell["seeds"]) == 2 and cell["mean"] == pytest.approx(sum(cell["seeds"]) / 2)
    # dpf and depth have a memory length T too (the lag; the nested memory's deepest lag 9s), hence H* per T
    # and a slope per row, like rate
    assert set(results["dpf"]) == {f"{task} / {qk}" for task in ("fixed", "adaptive", "content")
                                   for qk in ("QK^T", "no QK^T")}
    assert all(set(row["cells"]) == set(row["needed"]) == {"4", "8"} and "slope" in row
               for row in results["dpf"].values())
    assert set(results["depth"]) == {"nested / 1 layer", "nested / 2 layers"}
    assert all(set(row["cells"]) == {"9", "18"} for row in results["depth"].values())
    md = (tmp_path / "memory_results.md").read_text()
    assert "H*" in md and md.count("fitted H* ~ T^slope") == 3
    for experiment in ("rate", "dpf", "depth"):
        assert (tmp_path / f"memory_{experiment}.png").stat().st_size > 0
    lines = (tmp_path / "memory_runs.jsonl").read_text().splitlines()
    memory_tasks.main(args)
    assert (tmp_path / "memory_runs.jsonl").read_text().splitlines() == lines  # a rerun trains nothing again


def test_memory_cells_give_dpf_and_depth_a_memory_length_and_keep_the_recorded_keys():
    a = Namespace(**memory_tasks.SIZES["full"], only=["dpf", "depth"])
    cells = memory_tasks.cells(a)
    dpf = {(row, group): config for experiment, row, group, _, config in cells if experiment == "dpf"}
    assert {group for _, group in dpf} == {8, 16, 32}
    assert dpf["fixed / no QK^T", 32]["params"] == {"lags": [32]} and dpf["fixed / no QK^T", 32]["length"] == 64
    assert dpf["adaptive / QK^T", 8]["params"] == {"lags": [2, 4, 6, 8]}
    # the T = 16 cells are the ones of the single-lag runs, key for key
    assert "dpf|fixed / QK^T|16|8|0" in {memory_tasks.key_of(*c[:4], 0) for c in cells}
    depth = {(row, group): config for experiment, row, group, _, config in cells if experiment == "depth"}
    assert {group for _, group in depth} == {9, 18, 36}
    assert depth["nested / 3 layers", 36]["params"] == {"lags": [8, 24], "lags2": [12, 36]}
    assert depth["nested / 3 layers", 36]["length"] == 68 and depth["nested / 3 layers", 36]["start"] == 36
    # a depth model recorded with the single scale (group None) is the scale-1 cell, T = 9
    old = {"key": "depth|nested / 2 layers|None|4|1", "config": depth["nested / 2 layers", 9]}
    assert memory_tasks.recorded_key(old) == "depth|nested / 2 layers|9|4|1"
    other = {"key": "depth|nested / 2 layers|None|4|1", "config": depth["nested / 2 layers", 18]}
    assert memory_tasks.recorded_key(other) == other["key"]
