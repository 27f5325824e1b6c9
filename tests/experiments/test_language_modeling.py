"""The language-model sweep (experiments/language_modeling): its corpus split, its statistics, and the whole
pipeline (corpus, fairseq-train, fairseq-eval-lm at L/2L/4L, tables, plots) in --smoke mode."""

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.language_modeling import brown_sweep
from experiments.language_modeling.brown_sweep import (init_by_c, interaction_markdown, mean_std, paired_differences,
                                                       paired_t, parse_log, summarize, valid_fall)
from experiments.sweeps import load_script

REPO = Path(__file__).resolve().parents[2]


def load_make_slice():
    return load_script(REPO / "data/brown/make_slice.py")


def test_full_corpus_split_is_a_partition_of_the_500_files_by_genre_spanning_index():
    rules = load_make_slice().SPLITS["full"]
    chosen = {split: [i for i in range(500) if rule(i)] for split, rule in rules.items()}
    assert sorted(sum(chosen.values(), [])) == list(range(500))  # every file in exactly one split
    assert {split: len(files) for split, files in chosen.items()} == {"train": 462, "valid": 13, "test": 25}
    assert chosen["valid"] == [i for i in range(500) if load_make_slice().SPLITS["demo"]["valid"](i)]  # same as the demo's


def test_paired_t_interval_and_p_value_by_hand():
    """Differences -1, -2, -3: mean -2, sample std 1, so the 95% half-width is t(0.975, 2 df) / sqrt(3)
    = 4.302653 / 1.732051, and t = -2 sqrt(3), whose two-sided p with 2 df is 1 - |t| / sqrt(2 + t^2) = 0.0742."""
    got = paired_t([-1.0, -2.0, -3.0])
    half = 4.302652729911275 / math.sqrt(3.0)
    assert got["low"] == pytest.approx(-2.0 - half) and got["high"] == pytest.approx(-2.0 + half)
    t = 2.0 * math.sqrt(3.0)  # Student's t with 2 df: P(|T| > t) = 1 - t / sqrt(2 + t^2)
    assert got["p"] == pytest.approx(1.0 - t / math.sqrt(2.0 + t * t))


def test_mean_and_sample_std_and_pairing_by_seed():
    runs = [
        {"config": "t5", "seed": 1, "test_ppl": {"1": 100.0, "2": 110.0}, "curves": {"valid": [(50, 300.0), (100, 200.0)]},
         "train_seconds": 10},
        {"config": "t5", "seed": 2, "test_ppl": {"1": 104.0, "2": 118.0}, "curves": {"valid": [(50, 310.0), (100, 204.0)]},
         "train_seconds": 12},
        {"config": "t5+C bucketed", "seed": 2, "test_ppl": {"1": 101.0, "2": None}, "curves": {"valid": [(100, 199.0)]},
         "train_seconds": 11},
        {"config": "t5+C bucketed", "seed": 3, "test_ppl": {"1": 90.0, "2": 95.0}, "curves": {"valid": []},
         "train_seconds": 11},
    ]
    assert mean_std([1.0, 3.0]) == (2.0, math.sqrt(2.0))
    assert mean_std([5.0]) == (5.0, None) and mean_std([None]) == (None, None)
    summary = summarize(runs, ["t5", "t5+C bucketed"], [1, 2])
    assert summary["t5"]["test_ppl"]["1"] == {"mean": 102.0, "std": math.sqrt(8.0)}
    assert summary["t5"]["valid_curve"] == [{"updates": 50, "mean": 305.0, "std": math.sqrt(50.0)},
                                            {"updates": 100, "mean": 202.0, "std": math.sqrt(8.0)}]
    assert summary["t5+C bucketed"]["test_ppl"]["2"] == {"mean": 95.0, "std": None}  # the failed length is left out
    (row,) = paired_differences(runs, [1, 2])
    assert (row["config"], row["against"], row["seeds"]) == ("t5+C bucketed", "t5", [2])  # only seed 2 has both
    assert row["diff"]["1"] == {"mean": -3.0, "std": None, "n": 1, "low": None, "high": None, "p": None}
    assert row["diff"]["2"]["n"] == 0


def test_valid_fall_is_the_percent_drop_over_the_last_validation_interval():
    assert valid_fall([(400, 220.0), (450, 200.0), (500, 190.0)]) == (450, 500, pytest.approx(5.0))
    assert valid_fall([(500, 190.0)]) is None
    runs = [{"config": "t5", "seed": s, "test_ppl": {"1": 100.0}, "curves": {"valid": [(450, 200.0), (500, p)]},
             "train_seconds": 1} for s, p in ((1, 196.0), (2, 192.0))]
    fall = summarize(runs, ["t5"], [1])["t5"]["valid_fall_last"]
    assert (fall["from"], fall["to"]) == (450, 500)
    assert fall["pct_mean"] == pytest.approx(3.0) and fall["pct_std"] == pytest.approx(math.sqrt(2.0))


def test_init_by_c_pairs_the_four_cells_by_seed_and_reports_the_interaction():
    """C's effect at each start of T5's bias, the start's effect with and without C, and the interaction
    (C's effect with the flat start minus with ALiBi's line), seed by seed; a seed missing a cell is left out."""
    ppl = {("t5", 1): 200.0, ("t5+C bucketed", 1): 199.0, ("t5 zero-start", 1): 215.0, ("t5 zero-start+C bucketed", 1): 214.5,
           ("t5", 2): 202.0, ("t5+C bucketed", 2): 200.0, ("t5 zero-start", 2): 216.0, ("t5 zero-start+C bucketed", 2): 215.0,
           ("t5", 3): 201.0, ("t5+C bucketed", 3): 200.0, ("t5 zero-start", 3): 216.0}  # seed 3 lacks a cell
    runs = [{"config": c, "seed": s, "test_ppl": {"1": v}, "curves": {"valid": []}} for (c, s), v in ppl.items()]
    table = init_by_c(runs, [1])
    assert table["seeds"] == [1, 2]
    entry = table["by_factor"]["1"]
    assert entry["cells"]["zero yes"]["per_seed"] == [214.5, 215.0]
    effects = entry["effects"]
    assert effects["C, ALiBi-line start"]["per_seed"] == [-1.0, -2.0]
    assert effects["C, flat start"]["per_seed"] == [-0.5, -1.0]
    assert effects["flat start, no C"]["per_seed"] == [15.0, 14.0]
    assert effects["flat start, with C"]["per_seed"] == [15.5, 15.0]
    assert effects["interaction"]["per_seed"] == [0.5, 1.0]
    assert effects["interaction"]["mean"] == pytest.approx(0.75)
    text = "\n".join(interaction_markdown(table))
    assert "| flat (zero) start | 215.5 ± 0.7 | 214.8 ± 0.4 | -0.75 ± 0.35 |" in text
    assert "| interaction | 0.50 | 1.00 | 0.75 ± 0.35 | [-2.43, 3.93], p = 0.2 |" in text  # t-interval with 1 df
    assert init_by_c([r for r in runs if r["config"] != "t5 zero-start+C bucketed"], [1]) is None


def test_reuse_takes_the_finished_runs_of_an_earlier_sweep_with_the_same_settings(tmp_path):
    settings = {**brown_sweep.PRESETS["cpu"], "extra": ""}
    earlier = {"settings": settings, "runs": [
        {"config": "t5", "seed": 1, "arch": "transformer_lm_rpe", "flags": [], "test_ppl": {"1": 200.0}},
        {"config": "t5", "seed": 2, "arch": "transformer_lm_rpe", "flags": []},  # failed: no test_ppl, rerun
        {"config": "alibi", "seed": 1, "arch": "transformer_lm_alibi", "flags": [], "test_ppl": {"1": 210.0}},  # not asked for
        {"config": "t5 zero-start", "seed": 1, "arch": "transformer_lm_rpe", "flags": [], "test_ppl": {"1": 1.0}},  # other flags
    ]}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    a = argparse.Namespace(**settings, configs=["t5", "t5 zero-start"], seeds=[1, 2], reuse=str(tmp_path / "earlier.json"),
                           out=tmp_path / "out")
    (a.out / "eval").mkdir(parents=True)
    brown_sweep.reuse(a, argparse.ArgumentParser())
    assert sorted(p.name for p in (a.out / "eval").iterdir()) == ["t5-s1.json"]
    assert json.loads((a.out / "eval" / "t5-s1.json").read_text())["test_ppl"] == {"1": 200.0}
    a.max_update = 1000
    with pytest.raises(SystemExit):
        brown_sweep.reuse(a, argparse.ArgumentParser())


def test_parse_log_reads_train_loss_and_valid_perplexity(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "fairseq-train ...\n"
        '2026-01-01 00:00:00 | INFO | train_inner | {"epoch": 1, "loss": "9.3", "ppl": "630", "num_updates": "100"}\n'
        '2026-01-01 00:00:01 | INFO | valid | {"epoch": 1, "valid_loss": "8.8", "valid_ppl": "445.5", "valid_num_updates": "100"}\n'
    )
    assert parse_log(log) == {"train": [(100, 9.3)], "valid": [(100, 445.5)]}


@pytest.mark.e2e
@pytest.mark.slow
def test_run_brown_smoke_trains_evaluates_at_three_lengths_and_writes_tables_and_plots(tmp_path):
    env = dict(os.environ, URPE_VENV=sys.prefix, OUT=str(tmp_path / "out"),
               CONFIGS="stock,stock nope,t5 zero-start+C bucketed", SEEDS="1", PYTHONUNBUFFERED="1")
    for knob in ("PRESET", "FACTORS", "MAX_UPDATE", "CORPUS", "CORPUS_DIR", "JOBS", "THREADS", "EXTRA_ARGS", "REUSE"):
        env.pop(knob, None)
    done = subprocess.run(["bash", str(REPO / "experiments/language_modeling/run_brown.sh"), "--smoke"], env=env,
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:]
    assert "PRESET=smoke" in done.stdout and "[3/3]" in done.stdout
    out = tmp_path / "out"
    results = json.loads((out / "results.json").read_text())
    for config in ("stock", "stock nope", "t5 zero-start+C bucketed"):
        ppl = results["summary"][config]["test_ppl"]
        assert set(ppl) == {"1", "2", "4"}
        assert all(math.isfinite(v["mean"]) and v["mean"] > 1 for v in ppl.values())  # every token of the split scored
        assert results["summary"][config]["valid_curve"]
        assert results["summary"][config]["valid_fall_last"]["pct_mean"] is not None  # % per validation interval
    (run,) = [r for r in results["runs"] if r["config"] == "stock"]
    assert run["train_cpu_seconds"] > 0 and run["params"] > 0
    table = (out / "results.md").read_text()
    assert "| t5 zero-start+C bucketed | `transformer_lm_urpe --rpe-init zero` |" in table
    assert "| stock nope | `transformer_lm --no-token-positional-embeddings` |" in table
    assert (out / "extrapolation.png").stat().st_size > 0 and (out / "curves.png").stat().st_size > 0

    # --collect-only trains nothing: the tables of the runs finished so far ("t5" never ran here)
    collect = subprocess.run(["bash", str(REPO / "experiments/language_modeling/run_brown.sh"), "--smoke", "--collect-only"],
                             env=dict(env, CONFIGS="stock,t5,stock nope,t5 zero-start+C bucketed"), cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert collect.returncode == 0, collect.stdout[-4000:]
    assert "--collect-only: 3 finished run(s)" in collect.stdout
    assert not list((out / "logs").glob("train-t5-*")) and "t5" not in json.loads((out / "results.json").read_text())["summary"]

    # c_ablation: the URPE model's learned-c perplexity is the sweep's own at L; a model without C is refused
    urpe = out / "checkpoints" / "t5_zero-start-cbucketed-s1" / "checkpoint_last.pt"
    ablation = subprocess.run([sys.executable, "-m", "experiments.language_modeling.c_ablation", "--data",
                               str(out / "data-bin"), str(urpe)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300)
    assert ablation.returncode == 0, ablation.stdout[-4000:]
    learned, unit = map(float, ablation.stdout.strip().splitlines()[-1].strip("| ").split(" | ")[-2:])
    assert learned == pytest.approx(results["summary"]["t5 zero-start+C bucketed"]["test_ppl"]["1"]["mean"], rel=1e-4)
    assert math.isfinite(unit) and unit > 1
    refused = subprocess.run([sys.executable, "-m", "experiments.language_modeling.c_ablation", "--data",
                              str(out / "data-bin"), str(out / "checkpoints" / "stock-s1" / "checkpoint_last.pt")],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert refused.returncode != 0 and "has no URPE Toeplitz table" in refused.stdout


def test_investigation_tables_are_means_over_seeds_and_paired_differences(tmp_path):
    """collect.py on fairseq-train logs (lines as fairseq writes them): seed 1 is the bare run name,
    others "-s<seed>"; a run that stopped early counts where it got to and not in the paired table."""
    from experiments.language_modeling.investigation import collect

    def log(name, train100, valid):
        lines = [f"2026-12-01 00:01:42 | INFO | train_inner | epoch 001:    100 / 550 loss={train100}, ppl=1, wps=1, "
                 f"ups=1, wpb=2048, bsz=16, num_updates=100, lr=0.0015, gnorm=1, clip=0, train_wall=1, wall=1"
                 ] if train100 is not None else []
        lines += [f"2026-12-01 00:02:46 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8 | ppl {p} | "
                  f"wps 1 | wpb 2047.9 | bsz 16 | num_updates {u}" for u, p in valid.items()]
        (tmp_path / "logs" / f"{name}.log").write_text("\n".join(lines) + "\n")

    (tmp_path / "logs").mkdir()
    log("stock", 9.0, {50: 900.0, 100: 400.0, 200: 300.0, 300: 240.0})
    log("stock-s2", 9.2, {50: 1000.0, 100: 420.0, 200: 310.0, 300: 250.0})
    log("t5-zero", 9.1, {50: 800.0, 100: 390.0, 200: 280.0, 300: 230.0})
    log("t5-zero-s2", 9.1, {50: 800.0, 100: 400.0, 200: 290.0, 300: 236.0})
    log("t5-zero-s3", None, {50: 700.0})  # interrupted before update 100
    collect.main(tmp_path)
    data = json.loads((tmp_path / "investigation.json").read_text())
    stock, t5 = data["summary"]["stock"], data["summary"]["t5-zero"]
    assert stock["seeds"] == [1, 2] and t5["seeds"] == [1, 2, 3] and t5["finished_seeds"] == [1, 2]
    assert stock["valid_ppl"]["300"] == pytest.approx([245.0, math.sqrt(50.0)])
    assert t5["valid_ppl"]["50"][0] == pytest.approx(2300 / 3)  # the interrupted seed counts where it got to
    assert t5["train_loss_base2_at_100"] == pytest.approx([9.1, 0.0])
    (row,) = [r for r in data["paired"] if (r["run"], r["against"]) == ("t5-zero", "stock")]
    assert row["seeds"] == [1, 2]
    assert row["valid300"] == pytest.approx([-12.0, math.sqrt(8.0)])  # -10 and -14
    assert row["train100"] == pytest.approx([0.0, math.sqrt(0.02)])  # +0.1 and -0.1
    table = (tmp_path / "investigation.md").read_text()
    assert "| stock | 2 | 9.10 ± 0.14 | 950.0 ± 70.7 | 410.0 ± 14.1 | 305.0 ± 7.1 | 245.0 ± 7.1 |" in table
    assert (tmp_path / "investigation.png").stat().st_size > 0


def test_holm_adjustment_by_hand():
    """m = 4: sorted 0.005, 0.01, 0.03, 0.04 -> 4 x 0.005 = 0.02, 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, then
    max(0.06, 1 x 0.04) = 0.06 (step-down: never below an earlier adjusted p); capped at 1."""
    got = brown_sweep.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert got == pytest.approx({"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06})
    assert brown_sweep.holm({"x": 0.5, "y": 0.6}) == {"x": 1.0, "y": 1.0}
    assert brown_sweep.holm({"only": 0.04}) == {"only": 0.04}  # one test: unadjusted


def test_holm_family_counts_each_pair_per_length_and_the_interaction_once():
    """Four T5 cells over 3 seeds at one length: the PAIRS rows among them (C at each start, the start with and
    without C) and the interaction: 5 tests; the init x C effects that are pair rows share the rows' Holm p."""
    ppl = {"t5": [200.0, 202.0, 201.0], "t5+C bucketed": [199.0, 200.0, 200.2],
           "t5 zero-start": [215.0, 216.0, 216.5], "t5 zero-start+C bucketed": [214.5, 215.0, 214.0]}
    runs = [{"config": c, "seed": s + 1, "test_ppl": {"1": v}, "curves": {"valid": []}}
            for c, values in ppl.items() for s, v in enumerate(values)]
    diffs, table = paired_differences(runs, [1]), init_by_c(runs, [1])
    assert brown_sweep.add_holm(diffs, table) == 5
    raw = {(r["config"], r["against"]): r["diff"]["1"]["p"] for r in diffs}
    raw["interaction"] = table["by_factor"]["1"]["effects"]["interaction"]["p"]
    expected = brown_sweep.holm(raw)
    for r in diffs:
        assert r["diff"]["1"]["p_holm"] == pytest.approx(expected[(r["config"], r["against"])])
    effects = table["by_factor"]["1"]["effects"]
    assert effects["C, flat start"]["p_holm"] == pytest.approx(expected[("t5 zero-start+C bucketed", "t5 zero-start")])
    assert effects["interaction"]["p_holm"] == pytest.approx(expected["interaction"])


def test_committed_results_md_is_what_collect_only_writes_from_the_committed_runs():
    """docs/language_modeling/results.md byte for byte from results.json's settings and runs (the tables of
    `--collect-only` with REUSE of that file), Holm-adjusted p included."""
    results = json.loads((REPO / "docs/language_modeling/results.json").read_text())
    text = brown_sweep.tables_from_results(results)
    assert text == (REPO / "docs/language_modeling/results.md").read_text()
    assert f"Holm-adjusted over the {results['holm_tests']} paired tests" in text


def test_committed_confirmatory_tables_are_what_collect_only_and_the_analysis_write_from_the_committed_runs():
    """docs/language_modeling/confirmatory/: results.md as `--collect-only` writes it and confirmatory.md as the
    analysis writes it, byte for byte from the committed results.json (seeds 6-10 only)."""
    from experiments.language_modeling import confirmatory

    folder = REPO / "docs/language_modeling/confirmatory"
    results = json.loads((folder / "results.json").read_text())
    assert results["settings"]["seeds"] == list(confirmatory.SEEDS)
    assert brown_sweep.tables_from_results(results) == (folder / "results.md").read_text()
    stats = confirmatory.verdicts(confirmatory.differences(results["runs"]))
    assert confirmatory.markdown(stats) == (folder / "confirmatory.md").read_text()


def _confirmatory_runs(values):
    """Runs of the confirmatory cells: ``values[config][seed]`` test perplexity at L."""
    return [{"config": c, "seed": s, "test_ppl": {"1": v}} for c, by_seed in values.items() for s, v in by_seed.items()]


def test_confirmatory_differences_verdicts_and_holm_over_its_two_tests():
    from experiments.language_modeling import confirmatory

    seeds = confirmatory.SEEDS
    base = {c: {s: 200.0 + s for s in seeds} for c in confirmatory.CONFIGS}
    # interaction per seed: (zero+C - zero) - (t5+C - t5) = -2 - (-1) + noise; C on KERPLE: +0.1 (wrong sign)
    noise = dict(zip(seeds, (0.1, -0.2, 0.05, 0.0, -0.1)))
    for s in seeds:
        base["t5+C bucketed"][s] -= 1.0
        base["t5 zero-start+C bucketed"][s] -= 2.0 + noise[s]
        base["kerple+C bucketed"][s] += 0.1 + noise[s]
    base["t5"][1] = 0.0  # seed 1 is exploratory data: never read
    stats = confirmatory.verdicts(confirmatory.differences(_confirmatory_runs(base)))
    inter, kerple = stats["init x C interaction"], stats["C on KERPLE"]
    assert [round(inter["per_seed"][s], 6) for s in seeds] == [round(-1.0 - noise[s], 6) for s in seeds]
    assert inter["p"] == pytest.approx(paired_t([-1.0 - noise[s] for s in seeds])["p"])
    assert inter["p_holm"] == pytest.approx(brown_sweep.holm({"a": inter["p"], "b": kerple["p"]})["a"])
    assert inter["verdict"] == "confirmed"
    assert kerple["verdict"] == "not confirmed"  # positive mean: the other sign, whatever its p
    del base["kerple"][10]
    stats = confirmatory.verdicts(confirmatory.differences(_confirmatory_runs(base)))
    assert stats["C on KERPLE"]["verdict"] == "incomplete (4 of 5 seeds)"
    # still a family of the 2 planned tests: the incomplete one counts as p = 1
    assert stats["init x C interaction"]["p_holm"] == pytest.approx(min(1.0, 2 * stats["init x C interaction"]["p"]))
    assert "| C on KERPLE |" in confirmatory.markdown(stats)
