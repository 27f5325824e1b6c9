"""train.sh and run_baselines.sh: the tokens per update a run says are the ones fairseq parses (EXTRA_ARGS and
UPDATE_FREQ included), another batch only when BATCH_TOKENS asks for it and the run's name says it, the sweep's
check phase stopping on a run off its batch, and what keeps ALiBi's batch on 2 nodes of 8 GPUs."""

import re

import pytest

from .dry_run import dry_run, python_side, train_args

TWO_NODES = dict(GPUS=8, NNODES=2, MASTER_ADDR="node0")
ALIBI = dict(ARCH="transformer_lm_alibi_wiki103", TOKENS_PER_SAMPLE=512, MAX_TOKENS=9216)


@pytest.fixture
def full_dry_run(outside, full_size_data, stand_in_python):
    return lambda **knobs: dry_run("train.sh", outside, full_size_data, stand_in_python, **knobs)


def tokens_per_update(args):
    return args.max_tokens * args.distributed_world_size * args.update_freq[0]


def run_name(output):
    return re.search(r"^== run: (\S+) ", output, re.M).group(1)


def test_extra_args_that_change_the_batch_are_refused_with_the_tokens_per_update_fairseq_parses(full_dry_run):
    run = full_dry_run(GPUS=8, EXTRA_ARGS="--update-freq=6")
    assert run.returncode == 1
    assert "== 8 GPU(s) x 1 node(s), --max-tokens 3072 --update-freq 6: 147456 tokens per update" in run.output
    assert ("train.sh: error: fairseq parses 147,456 tokens per update (--max-tokens 3072 x 8 device(s) x --update-freq 6"
            in run.output)
    assert "not BATCH_TOKENS=73,728" in run.output and "DRY_RUN=1: not training" not in run.output
    more_tokens = full_dry_run(GPUS=8, EXTRA_ARGS="--max-tokens 6144")
    assert more_tokens.returncode == 1
    assert ("BATCH_TOKENS=73728 tokens per update is not a whole number of batches of --max-tokens 6144 (MAX_TOKENS, or "
            "EXTRA_ARGS) on 8 device(s)") in more_tokens.output


def test_update_freq_2_on_two_nodes_of_8_is_refused_and_batch_tokens_names_the_run_that_asks_for_it(full_dry_run):
    refused = full_dry_run(UPDATE_FREQ=2, **TWO_NODES)
    assert refused.returncode == 1
    assert "fairseq parses 98,304 tokens per update (--max-tokens 3072 x 16 device(s) x --update-freq 2" in refused.output
    assert "use a device count that divides 24 (the blocks of an update)" in refused.output
    assert "set BATCH_TOKENS to the tokens per update you want (the run's name carries it)" in refused.output

    asked = full_dry_run(BATCH_TOKENS=98304, **TWO_NODES).check()
    args = train_args(asked.output)
    assert tokens_per_update(args) == 98304 and args.update_freq == [2] and args.distributed_world_size == 16
    assert run_name(asked.output) == "transformer_lm_urpe_wiki103-L3072-batch98304-init_zero-seed1-words-fp16"
    assert "== BATCH_TOKENS=98304 is not the reference 73,728 tokens per update" in asked.output
    reference = full_dry_run(GPUS=8).check()
    assert run_name(reference.output).startswith("transformer_lm_urpe_wiki103-L3072-batch73728-")
    assert "is not the reference" not in reference.output


def test_alibi_on_two_nodes_of_8_is_told_the_max_tokens_that_keeps_73728_and_trains_at_it(full_dry_run):
    for knobs in (dict(UPDATE_FREQ=2), {}):
        refused = full_dry_run(**ALIBI, **TWO_NODES, **knobs)
        assert refused.returncode == 1, knobs
        assert ("MAX_TOKENS=4608 (and no UPDATE_FREQ) keeps 73,728 tokens per update on 16 device(s): 9 block(s) of "
                "L = 512 per device, --update-freq 1") in refused.output, refused.output[-2000:]
    kept = train_args(full_dry_run(**dict(ALIBI, MAX_TOKENS=4608), **TWO_NODES).check().output)
    assert (kept.max_tokens, kept.update_freq, tokens_per_update(kept)) == (4608, [1], 73728)


def test_sweep_fits_alibis_batch_per_gpu_to_the_gpu_count_and_keeps_press_et_als_on_8():
    sweep = python_side("sweep_runs")
    alibi = {arch: knobs for arch, knobs in sweep.runs("core", "", 0, 73728, 8)}["transformer_lm_alibi_wiki103"]
    assert alibi == {"TOKENS_PER_SAMPLE": "512", "MAX_TOKENS": "9216"}
    on_16 = {arch: knobs for arch, knobs in sweep.runs("core", "", 0, 73728, 16)}["transformer_lm_alibi_wiki103"]
    assert on_16["MAX_TOKENS"] == "4608"
    asked = {arch: knobs for arch, knobs in sweep.runs("core", "", 0, 98304, 16)}["transformer_lm_alibi_wiki103"]
    assert asked["MAX_TOKENS"] == "6144"  # 98,304 / 16 GPUs: 12 blocks of 512


def test_sweep_check_phase_stops_on_a_run_whose_batch_is_not_the_sweeps(monkeypatch, tmp_path, full_size_data,
                                                                         stand_in_python, capsys):
    """run_baselines.sh's check phase (sweep_runs.py --check), as a 2 x 8 sweep with UPDATE_FREQ=2 runs it: the
    first run is refused with fairseq's tokens per update, and the sweep stops before anything starts."""
    for name, value in dict(TWO_NODES, UPDATE_FREQ=2, WT103_DIR=full_size_data, URPE_VENV=stand_in_python).items():
        monkeypatch.setenv(name, str(value))
    sweep = python_side("sweep_runs")
    with pytest.raises(SystemExit) as stopped:
        sweep.main(["--sweep", "core", "--runs-file", str(tmp_path / "runs"), "--tokens-per-sample", "3072",
                    "--max-update", "286000", "--batch-tokens", "73728", "--peak-tflops", "312", "--devices", "16",
                    "--check"])
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert "fairseq parses 98,304 tokens per update" in err
    assert "run_baselines.sh: error: transformer_lm_wiki103: train.sh refuses this run (above); nothing was started" in err
    assert not (tmp_path / "runs").exists() and not (full_size_data / "checkpoints").exists()


def test_bf16_in_extra_args_at_fp16_is_refused_naming_why_not_with_a_traceback(full_dry_run):
    run = full_dry_run(GPUS=8, PRECISION="fp16", EXTRA_ARGS="--bf16")
    assert run.returncode == 1 and "Traceback" not in run.output
    assert ("train.sh: error: fairseq-train's parser refuses the command (Cannot combine --fp16 and --tpu, use --bf16 on "
            "TPUs): EXTRA_ARGS' --bf16 turns on --tpu in fairseq 0.12.3.1") in run.output


def test_max_update_below_warmup_without_lr_period_updates_is_refused_saying_why(outside, full_size_data,
                                                                                stand_in_python):
    run = dry_run("train.sh", outside, full_size_data, stand_in_python, GPUS=8, MAX_UPDATE=2000)
    assert run.returncode == 1
    assert ("train.sh: error: LR_PERIOD_UPDATES defaults to MAX_UPDATE - WARMUP_UPDATES = 2000 - 16000 = -14000, the "
            "cosine period after warm-up, which must be positive") in run.output
    assert "set LR_PERIOD_UPDATES=270000" in run.output
    given = dry_run("train.sh", outside, full_size_data, stand_in_python, GPUS=8, MAX_UPDATE=2000,
                    LR_PERIOD_UPDATES=270000).check()
    assert train_args(given.output).lr_period_updates == 270000
