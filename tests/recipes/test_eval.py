"""eval.sh and run_baselines.sh: the perplexity tables of the SMOKE models (standard, sliding window,
fairseq's protocol, 2L and 4L) batched within training's tokens per forward, one retry at half the batch
after an out-of-memory error, the results table of the comparison, the sweeps and their cost, the
command line of the check against fairseq's released model, and a missing checkpoint."""

import json
import math
import os
import re

import numpy as np
import pytest

from fairseq_urpe.fairseq_runs import valid_losses

from .conftest import PIPELINE_ARCHS, PIPELINE_RUNS, RECIPES, SMOKE_MAX_TOKENS, SMOKE_MAX_UPDATE, run_recipe
from .dry_run import dry_run, eval_lm_args, eval_lm_commands, python_side, train_args
from .readme_commands import code_commands

L = 64  # train.sh's SMOKE block length
RUNS = dict(zip(PIPELINE_ARCHS, PIPELINE_RUNS))


def report(recipe_runs, arch):
    return json.loads((recipe_runs.dir / "results" / RUNS[arch] / "eval.json").read_text())


def rows_by(report_):
    return {(r["split"], r["kind"], r["factor"]): r for r in report_["rows"]}


def fairseq_train_last_valid_loss(recipe_runs, arch):
    log = (recipe_runs.dir / "logs" / f"train-{RUNS[arch]}.log").read_text()
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
    expected = {("standard", 1): (L, 0, "none"), ("sliding", 1): (L, L - L // 6, "none"),
                ("fairseq", 1): (L, L - L // 6, "complete"), ("press", 1): (L, L - 1, "none"),
                ("extrapolation", 2): (2 * L, 0, "none"), ("extrapolation", 4): (4 * L, 0, "none"),
                ("extrapolation", 6): (6 * L, 0, "none")}
    assert sorted(rows) == sorted((split, kind, k) for split in ("valid", "test") for kind, k in expected)
    for (split, kind, k), row in rows.items():
        assert (row["tokens_per_sample"], row["context_window"], row["break_mode"]) == expected[kind, k]
        assert row["status"] == "ok", row
        assert row["tokens"] == row["split_tokens"] == row["words"] == words[split]["words"]  # all scored
        assert row["ppl_word"] == pytest.approx(row["ppl_token"]) == pytest.approx(2 ** row["loss_base2"])
        assert 1 < row["ppl_word"] < 3600 and math.isfinite(row["ppl_word"])  # below uniform over the vocabulary
    # The standard row is fairseq-train's own last validation of the same checkpoint (3 decimals logged).
    assert rows["valid", "standard", 1]["loss_base2"] == pytest.approx(fairseq_train_last_valid_loss(recipe_runs, arch), abs=2e-3)

    table = (recipe_runs.dir / "results" / RUNS[arch] / "eval.md").read_text()
    test_row = rows["test", "standard", 1]
    assert f"| test | non-overlapping | {L} | 0 | {SMOKE_MAX_TOKENS} | {test_row['tokens']} | {test_row['ppl_word']:.2f} |" in table
    sweep = rep["extrapolation"]["ppl_word"]["test"]
    assert f"| test | {sweep['1']:.2f} | {sweep['2']:.2f} | {sweep['4']:.2f} | {sweep['6']:.2f} |" in table
    assert rep["smoke_slice"]["test"]["tokens"] == rep["smoke_slice"]["test"]["of_tokens"]  # the fixture fits the slice


@pytest.mark.e2e
def test_eval_batches_hold_no_more_tokens_per_forward_than_training(recipe_runs):
    """fairseq-eval-lm's --max-tokens counts scored tokens; a sliding window of L tokens scores L - C of
    them, so a batch of --max-tokens M runs M / (L - C) windows of L tokens: eval.sh sets M so that this is
    training's --max-tokens (256 in SMOKE mode: 4 windows of 64), not 4L = 256 scored tokens (25 windows)."""
    recipe_runs.get("baselines").check()
    rep = report(recipe_runs, PIPELINE_ARCHS[0])
    assert rep["model"]["train_max_tokens"] == SMOKE_MAX_TOKENS
    for row in rep["rows"]:
        scored_per_item = row["tokens_per_sample"] - row["context_window"]
        items = row["max_tokens"] // scored_per_item
        if row["kind"] in ("standard", "sliding"):
            assert items * row["tokens_per_sample"] == SMOKE_MAX_TOKENS, row
        elif row["kind"] == "extrapolation":
            assert max(items, 1) * row["tokens_per_sample"] <= max(SMOKE_MAX_TOKENS, row["tokens_per_sample"]), row
    assert rows_by(rep)["test", "sliding", 1]["max_tokens"] == 4 * 10  # 4 windows of 64 tokens, 10 of them scored


def test_out_of_memory_is_retried_once_at_half_the_batch_in_whole_windows():
    oom_retry = python_side("oom_retry")
    calls = []

    def evaluate(max_tokens):
        calls.append(max_tokens)
        if max_tokens > 2000:
            raise RuntimeError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return "scored"

    assert oom_retry.with_one_retry_at_half(evaluate, 3 * 1024, unit=512, floor=512) == ("scored", 1536)
    assert calls == [3072, 1536]  # half of 3072, in whole windows of 512

    calls.clear()
    with pytest.raises(RuntimeError, match="out of memory"):  # once only: a second failure is final
        oom_retry.with_one_retry_at_half(evaluate, 9000, unit=512, floor=512)
    assert calls == [9000, 4096]

    calls.clear()
    with pytest.raises(RuntimeError, match="out of memory"):  # one window cannot be halved
        oom_retry.with_one_retry_at_half(evaluate, 2560, unit=2560, floor=2560)
    assert calls == [2560]

    def broken(max_tokens):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):  # other errors are not retried
        oom_retry.with_one_retry_at_half(broken, 3072, unit=512, floor=512)


@pytest.mark.e2e
def test_run_baselines_ends_in_one_table_of_every_run_with_what_defines_it(recipe_runs):
    run = recipe_runs.get("baselines").check()
    table = (recipe_runs.dir / "results" / "baselines-smoke.md").read_text()
    records = json.loads((recipe_runs.dir / "results" / "baselines-smoke.json").read_text())
    assert [(r["arch"], r["run"]) for r in records] == list(RUNS.items())
    assert table.splitlines()[0] in run.output  # printed at the end
    assert table.splitlines()[0].startswith("| arch | L | tokens per update | RPE_INIT | seed | data | precision | "
                                            "attention path | parameters | updates | training time | valid ppl | test ppl "
                                            "| test, sliding window | test, fairseq protocol (Baevski & Auli's 18.7) | "
                                            "test, Press et al.'s protocol (stride 1) |")
    for record in records:
        rep = report(recipe_runs, record["arch"])
        rows = rows_by(rep)
        assert record["test"] == rows["test", "standard", 1]["ppl_word"]
        assert record["test_fairseq"] == rows["test", "fairseq", 1]["ppl_word"]
        assert record["test_4L"] == rows["test", "extrapolation", 4]["ppl_word"]
        assert record["train_seconds"] > 0 and (record["L"], record["seed"], record["precision"]) == (L, 1, "fp32")
        assert record["test_press"] == rows["test", "press", 1]["ppl_word"] and record["tokens_per_update"] == 512
        assert f"| {record['arch']} | {L} | 512 | {record['rpe_init'] or '-'} | 1 | wikitext-103 | fp32 | {record['attention_path']} | " \
               f"{record['params']:,} | {SMOKE_MAX_UPDATE} |" in table
    urpe, stock = records
    assert urpe["rpe_init"] == "zero" and stock["rpe_init"] is None
    assert urpe["attention_path"].startswith("dense (") and stock["attention_path"] == "fairseq's own attention"
    # The plugin adds its relative-position parameters on top of the same stock layout.
    assert 0 < urpe["params"] - stock["params"] < 1000


def test_default_sweep_is_the_core_four_and_its_cost_is_printed_before_anything_starts(outside, full_size_data,
                                                                                       stand_in_python):
    run = dry_run("run_baselines.sh", outside, full_size_data, stand_in_python, GPUS=8).check()
    runs = re.findall(r"^  (transformer_lm\w*)((?: \w+=\w+)*): ([\d.,-]+) GPU-hours$", run.output, re.M)
    assert [(arch, knobs.strip()) for arch, knobs, _ in runs] == [
        ("transformer_lm_wiki103", ""), ("transformer_lm_alibi_wiki103", "TOKENS_PER_SAMPLE=512 MAX_TOKENS=9216"),
        ("transformer_lm_rpe_wiki103", ""), ("transformer_lm_urpe_wiki103", "")]
    assert "  RPE_INIT=zero" in run.output  # the URPE paper's flat start for the rpe/urpe pair
    # The README's throughput model: stock at L = 3072, 286,000 x 73,728 tokens x 1.93 GFLOP at 30% of 312 TFLOP/s.
    assert runs[0][2] == "121.1"
    assert re.search(r"^== cost \(estimate, not measured\): 519\.2-950\.4 GPU-hours in all, 2\.7-5\.0 days on these 8 GPUs",
                     run.output, re.M)
    assert not (outside / "checkpoints").exists()


def test_full_sweep_is_stock_then_every_kinds_rpe_and_urpe_pair_from_the_registry(outside, full_size_data,
                                                                                 stand_in_python):
    """Read from the plugin's registry when the script runs: a kind registered there joins the list."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_urpe.models.architectures import baseline_variants

    run = dry_run("run_baselines.sh", outside, full_size_data, stand_in_python, SWEEP="full").check()
    archs = re.findall(r"^  (transformer_lm\S*?):? ", run.output, re.M)
    assert archs == ["transformer_lm_wiki103"] + [f"transformer_lm_{v}_wiki103" for v in baseline_variants()]
    assert len(archs) >= 13 and all(arch in ARCH_MODEL_REGISTRY for arch in archs)
    assert "== cost (estimate, not measured):" in run.output


def released_model_commands():
    """The README's three commands for fairseq's released adaptive_lm_wiki103.v2: the download, the binarization
    with its dictionary, the evaluation (the last two as (script, knobs))."""
    text = (RECIPES / "README.md").read_text()
    download = next(line for line in text.splitlines() if "adaptive_lm_wiki103.v2.tar.bz2" in line and "wget" in line)
    scripts = {script: knobs for script, knobs, line in code_commands(text) if "adaptive_lm_wiki103.v2" in line}
    return download, scripts["binarize.sh"], scripts["eval.sh"]


def test_released_model_check_runs_fairseqs_own_evaluation_as_the_readme_writes_it(tmp_path, monkeypatch, outside,
                                                                                  full_size_data, stand_in_python):
    """The README's command for fairseq's adaptive_lm_wiki103.v2 (not downloaded here), run as written (DRY_RUN)
    on a stand-in of the released model.pt: fairseq 0.12's stock transformer_lm_wiki103 arguments as an
    argparse.Namespace, in torch's layout before 1.6 (not a zip), at the README's path, and a data-bin folder of
    WikiText-103's dictionary size at the README's DATA_BIN. L and the batch come from that checkpoint; the
    fairseq-protocol rows are fairseq's evaluation (--sample-break-mode complete, context 2560 of L = 3072,
    softmax batch 1024) as fairseq-eval-lm parses them, batched within 3,072 tokens per forward."""
    import torch

    download, binarize, evaluate = released_model_commands()
    assert download.startswith("wget https://dl.fbaipublicfiles.com/fairseq/models/lm/adaptive_lm_wiki103.v2.tar.bz2 ")
    assert binarize["DATA_BIN"] == evaluate["DATA_BIN"]  # evaluated on data encoded with the model's own dictionary
    assert binarize["SRCDICT"] == "adaptive_lm_wiki103.v2/dict.txt"
    assert evaluate["CHECKPOINT"] == "adaptive_lm_wiki103.v2/model.pt" and "MAX_TOKENS" not in evaluate

    stock = train_args(dry_run("train.sh", outside, full_size_data, stand_in_python, GPUS=8,
                               ARCH="transformer_lm_wiki103").check().output)
    model = outside / evaluate["CHECKPOINT"]
    model.parent.mkdir()
    torch.save({"args": stock, "model": {}, "extra_state": {}, "optimizer_history": [
        {"criterion_name": "AdaptiveLoss", "optimizer_name": "NAG", "lr_scheduler_state": {"best": None},
         "num_updates": 286000}]}, model, _use_new_zipfile_serialization=False)
    data = outside / evaluate["DATA_BIN"]
    data.parent.mkdir(parents=True)
    data.symlink_to(full_size_data / "data-bin" / "wikitext-103")

    run = dry_run("eval.sh", outside, full_size_data, stand_in_python, **evaluate).check()
    assert "== run: adaptive_lm_wiki103.v2 " in run.output
    commands = eval_lm_commands(run.output)
    for split in ("valid", "test"):
        args = eval_lm_args(commands[split, "fairseq protocol: sliding window, --sample-break-mode complete"])
        assert (args.sample_break_mode, args.context_window, args.tokens_per_sample) == ("complete", 2560, 3072)
        assert args.softmax_batch == 1024 and args.gen_subset == split
        assert args.path == str(model) and args.data == str(data)
        assert args.max_tokens == 700  # one block of 512 scored tokens, or the longest line (700) alone
        sliding = eval_lm_args(commands[split, "sliding window"])
        assert (sliding.sample_break_mode, sliding.max_tokens) == ("none", 512)  # one window of 3072 per forward
        assert eval_lm_args(commands[split, "non-overlapping"]).max_tokens == 3072
    assert "== DRY_RUN=1: not evaluating" in run.output and not (outside / "results").exists()


def test_fp16_evaluation_reaches_fairseq_eval_lm_on_a_gpu_and_is_refused_on_cpu(outside, full_size_data,
                                                                              stand_in_python):
    data = full_size_data / "data-bin" / "wikitext-103"
    run = dry_run("eval.sh", outside, full_size_data, stand_in_python, DATA_BIN=data, CPU=0, EVAL_PRECISION="fp16").check()
    commands = eval_lm_commands(run.output)
    assert len(commands) == 14  # 7 settings x valid, test
    for argv in commands.values():
        args = eval_lm_args(argv)
        assert args.fp16 and not args.cpu and not args.bf16
    cpu = run_recipe("eval.sh", outside, full_size_data, timeout=60, DRY_RUN=1, DATA_BIN=data, CPU=1, EVAL_PRECISION="fp16")
    assert cpu.returncode != 0 and "eval.sh: error: EVAL_PRECISION=fp16 needs a GPU (CPU=1)" in cpu.output


def test_a_row_that_runs_out_of_memory_is_evaluated_again_at_half_its_batch(monkeypatch):
    """eval_lm_table.evaluate: fairseq-eval-lm (here a stand-in for its run, run_eval_lm) runs out of memory at
    the row's batch; the row is evaluated once more at half of it, in whole blocks, and says which batch it took."""
    import argparse

    import torch

    table = python_side("eval_lm_table")
    calls = []

    def run_eval_lm(argv):
        calls.append(int(argv[argv.index("--max-tokens") + 1]))
        if len(calls) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return 7.0, 100, 1234

    monkeypatch.setattr(table, "run_eval_lm", run_eval_lm)
    options = argparse.Namespace(data="data", checkpoint="model.pt", cpu=False, fp16=False, context_window=-1,
                                 protocols=["sliding"],
                                 max_tokens=0, splits=["test"], extrapolate=[1], words={"test": 100})
    rows = table.make_rows(options, 3072, 4 * 3072, True, {"test": np.array([40, 60])})
    standard, sliding = rows[0], rows[1]
    assert (standard["max_tokens"], sliding["max_tokens"]) == (4 * 3072, 4 * 512)  # training's 4 blocks per forward
    assert table.evaluate(options, standard, options.words) == 1234
    assert calls == [4 * 3072, 2 * 3072] and standard["max_tokens"] == 2 * 3072 and standard["status"] == "ok"
    calls.clear()
    table.evaluate(options, sliding, options.words)
    assert calls == [4 * 512, 2 * 512] and sliding["status"] == "ok"  # whole windows of 512 scored tokens


def test_checkpoint_of_an_older_fairseq_with_its_arguments_as_a_namespace_is_read(tmp_path, monkeypatch,
                                                                                 full_size_data, outside,
                                                                                 stand_in_python):
    """fairseq's released models predate its config objects: their ``args`` is an argparse.Namespace, which
    torch >= 2.6 refuses to load with its default weights_only=True (fairseq's loader too). eval.sh reads
    such a checkpoint as data (weights-only, with argparse.Namespace allowed) through fairseq's own upgrade
    to a ``cfg``, and leaves torch's defaults as they were for the rest of the process."""
    import argparse

    import torch

    args = dry_run("train.sh", outside, full_size_data, stand_in_python, GPUS=1, ARCH="transformer_lm_wiki103")
    namespace = train_args(args.check().output)
    old = tmp_path / "model.pt"
    torch.save({"args": namespace, "model": {}, "extra_state": {"previous_training_time": 12.5},
                "optimizer_history": [{"criterion_name": "AdaptiveLoss", "optimizer_name": "NAG",
                                       "lr_scheduler_state": {"best": None}, "num_updates": 7}]}, old)
    assert isinstance(namespace, argparse.Namespace)
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(old, map_location="cpu")
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    cfg, updates, seconds = python_side("eval_lm_table").read_checkpoint(str(old))
    assert (cfg["model"]["_name"], cfg["task"]["tokens_per_sample"], updates, seconds) == ("transformer_lm_wiki103", 3072, 7, 12.5)
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(old, map_location="cpu")


def test_missing_checkpoint_fails_naming_it(outside):
    run = run_recipe("eval.sh", outside, "wt103", timeout=60, RUN_NAME="never-trained")
    assert run.returncode != 0
    assert f"eval.sh: error: no checkpoint {outside}/wt103/checkpoints/never-trained/checkpoint_last.pt" in run.output
    assert not (outside / "wt103").exists()


def test_smoke_eval_scores_a_bounded_slice_of_each_split_and_says_so(outside, full_size_data, stand_in_python):
    """SMOKE=1: every evaluation reads the first lines of each split up to SMOKE_EVAL_TOKENS tokens (here the
    first line, 10 of 740 tokens), from a folder of its own that is gone afterwards."""
    data = full_size_data / "data-bin" / "wikitext-103"
    run = dry_run("eval.sh", outside, full_size_data, stand_in_python, DATA_BIN=data, SMOKE=1,
                  SMOKE_EVAL_TOKENS=100).check()
    for split in ("valid", "test"):
        assert (f"== SMOKE=1: {split}: each evaluation scores the first 10 of its 740 tokens (1 of 3 lines; "
                "SMOKE_EVAL_TOKENS=100)") in run.output
    commands = eval_lm_commands(run.output)
    assert len(commands) == 14 and all(argv[0] != str(data) for argv in commands.values())
    only = dry_run("eval.sh", outside, full_size_data, stand_in_python, DATA_BIN=data, SMOKE=1, PROTOCOLS="press",
                   EXTRAPOLATE="1").check()
    assert sorted(name for _, name in eval_lm_commands(only.output)) == sorted(
        ["non-overlapping", "Press et al.'s protocol: sliding window, stride 1"] * 2)
    assert not os.path.exists(next(iter(commands.values()))[0])  # the slice's folder, removed
    whole = dry_run("eval.sh", outside, full_size_data, stand_in_python, DATA_BIN=data, SMOKE=1).check()
    assert "each evaluation scores the first 740 of its 740 tokens (3 of 3 lines; SMOKE_EVAL_TOKENS=8192): the whole split" \
        in whole.output


@pytest.mark.e2e
def test_smoke_eval_on_a_slice_scores_exactly_the_slice_in_every_protocol(recipe_runs, tmp_path):
    recipe_runs.get("baselines").check()
    results = tmp_path / "results"
    run = run_recipe("eval.sh", recipe_runs.cwd, recipe_runs.wt103, timeout=600, SMOKE=1, ARCH=PIPELINE_ARCHS[0],
                     SMOKE_EVAL_TOKENS=500, SPLITS="test", RESULTS_DIR=results).check()
    rep = json.loads((results / "eval.json").read_text())
    kept = rep["smoke_slice"]["test"]
    assert 400 < kept["tokens"] <= 500 < kept["of_tokens"]
    assert f"== SMOKE=1: test: each evaluation scores the first {kept['tokens']} of its {kept['of_tokens']:,} tokens" in run.output
    assert len(rep["rows"]) == 7
    for row in rep["rows"]:
        assert row["status"] == "ok" and row["tokens"] == row["split_tokens"] == row["words"] == kept["tokens"], row
    assert "SMOKE: each evaluation scores the first lines of its split only" in (results / "eval.md").read_text()


def test_eval_finds_the_runs_precision_where_the_machine_differs_from_the_one_that_trained(tmp_path, outside,
                                                                                         full_size_data, stand_in_python):
    """Trained in fp16 on GPUs, evaluated on a machine without nvidia-smi (CPU=1): eval.sh finds the fp16 run
    instead of looking for an fp32 one; with both trained it asks for PRECISION."""
    wt103 = tmp_path / "wt103"
    wt103.mkdir()
    (wt103 / "data-bin").symlink_to(full_size_data / "data-bin")
    fp16 = "transformer_lm_urpe_wiki103-L3072-batch73728-init_zero-seed1-words-fp16"
    (wt103 / "checkpoints" / fp16).mkdir(parents=True)
    run = dry_run("eval.sh", outside, wt103, stand_in_python, CPU=1).check()
    assert f"== run: {fp16} " in run.output
    (wt103 / "checkpoints" / fp16.replace("fp16", "fp32")).mkdir()
    both = dry_run("eval.sh", outside, wt103, stand_in_python, CPU=1)
    assert both.returncode == 1 and "set PRECISION=fp16 or fp32" in both.output
    assert f"== run: {fp16.replace('fp16', 'fp32')} " in dry_run("eval.sh", outside, wt103, stand_in_python, CPU=1,
                                                                 PRECISION="fp32").check().output
