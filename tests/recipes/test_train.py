"""train.sh: the SMOKE model on CPU, two CPU processes training as one (gloo), resuming after a kill,
the --update-freq derived from the device count, a truncated checkpoint_last.pt, an unknown arch, the start
of the learned bias (RPE_INIT)."""

import re
import shutil
import subprocess
import sys

import pytest
import torch

from .conftest import (PIPELINE_ARCHS, RECIPES, RESUME_MAX_UPDATE, RESUME_SAVE_INTERVAL, SMOKE_BATCH_TOKENS,
                       SMOKE_MAX_TOKENS, SMOKE_MAX_UPDATE, ZERO_START_MAX_UPDATE, load_checkpoint, num_updates,
                       run_recipe, train_inner, weights)

URPE = PIPELINE_ARCHS[0]


def smoke_dir(recipe_runs, run_name):
    return recipe_runs.dir / "checkpoints" / run_name


@pytest.mark.e2e
def test_smoke_training_on_cpu_derives_update_freq_2(recipe_runs):
    baselines = recipe_runs.get("baselines").check()
    assert "CPU, 1 process(es), --max-tokens 256 --update-freq 2: 512 tokens per update" in baselines.output
    log = (recipe_runs.dir / "logs" / f"train-{URPE}-smoke.log").read_text()
    checkpoint = load_checkpoint(smoke_dir(recipe_runs, f"{URPE}-smoke") / "checkpoint_last.pt")
    assert num_updates(checkpoint) == SMOKE_MAX_UPDATE
    cfg = checkpoint["cfg"]
    assert cfg["model"]["_name"] == URPE
    assert (cfg["model"]["decoder_layers"], cfg["model"]["decoder_embed_dim"]) == (2, 64)
    assert cfg["model"]["adaptive_input"] and cfg["criterion"]["_name"] == "adaptive_loss"
    assert cfg["optimization"]["update_freq"] == [2] and cfg["dataset"]["max_tokens"] == SMOKE_MAX_TOKENS
    assert cfg["distributed_training"]["distributed_world_size"] == 1
    assert cfg["common"]["tensorboard_logdir"] == str(recipe_runs.dir / "tensorboard" / f"{URPE}-smoke")
    assert list((recipe_runs.dir / "tensorboard" / f"{URPE}-smoke").rglob("events.out.tfevents.*"))
    updates = train_inner(log)
    assert max(updates) == SMOKE_MAX_UPDATE
    assert float(updates[SMOKE_MAX_UPDATE]["loss"]) < float(updates[5]["loss"]) - 1


@pytest.mark.e2e
def test_two_cpu_processes_train_as_one_model_with_twice_the_tokens_per_step(recipe_runs):
    """CPU_PROCS=2 (two fairseq-train ranks over gloo, --update-freq 1) against the pipeline's single
    process (--update-freq 2), both derived by train.sh from BATCH_TOKENS=512 and MAX_TOKENS=256.

    Same batches: fairseq builds and shuffles one list of batches from the same seed in every process;
    rank r takes batches r, r + 2, ... (ShardedIterator) and a single process with --update-freq 2 takes
    batches 2k and 2k + 1 for update k (GroupedIterator): the same pairs. Same gradient: legacy_ddp sums
    the two ranks' gradients, as accumulation sums the two micro-batches, and both divide by the same
    total token count. No dropout in SMOKE mode, so no random stream differs. A sum of two float32
    gradients does not depend on their order, so the weights come out equal bit for bit (observed);
    the test allows 1e-6 in case a platform's all-reduce adds in another precision.
    """
    distributed = recipe_runs.get("distributed").check()
    recipe_runs.get("baselines").check()
    assert "CPU, 2 process(es), --max-tokens 256 --update-freq 1: 512 tokens per update" in distributed.output
    assert "rank 0 finished" in distributed.output and "rank 1 finished" in distributed.output
    rank1 = (recipe_runs.dir / "logs" / "train-distributed.rank1.log").read_text()
    assert re.search(r"distributed init \(rank 1\): tcp://127\.0\.0\.1:\d+", rank1)

    two = load_checkpoint(smoke_dir(recipe_runs, "distributed") / "checkpoint_last.pt")
    one = load_checkpoint(smoke_dir(recipe_runs, f"{URPE}-smoke") / "checkpoint_last.pt")
    assert two["cfg"]["distributed_training"]["distributed_world_size"] == 2
    assert two["cfg"]["distributed_training"]["distributed_backend"] == "gloo"
    assert two["cfg"]["optimization"]["update_freq"] == [1]
    assert num_updates(two) == num_updates(one) == SMOKE_MAX_UPDATE

    # Twice the tokens of one rank's batch in every update (all but the split's last, shorter block).
    rank0_updates = train_inner(distributed.output)
    assert sorted(rank0_updates) == list(range(5, SMOKE_MAX_UPDATE + 1, 5))
    assert rank0_updates[SMOKE_MAX_UPDATE]["wpb"] == 2 * SMOKE_MAX_TOKENS == SMOKE_BATCH_TOKENS
    one_log = (recipe_runs.dir / "logs" / f"train-{URPE}-smoke.log").read_text()
    assert {n: u["loss"] for n, u in train_inner(one_log).items()} == {n: u["loss"] for n, u in rank0_updates.items()}

    w_two, w_one = weights(two), weights(one)
    assert w_two.keys() == w_one.keys() and len(w_one) > 10
    max_diff = max((w_two[k] - w_one[k]).abs().max().item() for k in w_one)
    moved = max((w_one[k] - weights(load_checkpoint(smoke_dir(recipe_runs, f"{URPE}-smoke") / "checkpoint_1_20.pt"))[k])
                .abs().max().item() for k in w_one)
    print(f"max |two processes - one process, update-freq 2| = {max_diff:.3g} (last 20 updates moved weights by {moved:.3g})")
    assert max_diff <= 1e-6, max_diff
    assert moved > 1e-2  # the comparison is not trivially between untrained models


@pytest.mark.e2e
def test_killed_training_resumes_from_checkpoint_last_to_the_same_final_update(recipe_runs):
    runs = recipe_runs.get("resume")
    killed, rerun = runs["killed"], runs["rerun"]
    assert killed.returncode != 0, killed.output[-3000:]  # stopped by SIGTERM, not finished
    assert "done training" not in killed.output
    assert runs["at_kill"] is not None, killed.output[-3000:]
    at_kill = num_updates(load_checkpoint(runs["at_kill"]))
    assert at_kill % RESUME_SAVE_INTERVAL == 0 and 0 < at_kill < RESUME_MAX_UPDATE
    killed_updates = train_inner(killed.output)

    rerun.check()
    last = recipe_runs.dir / "checkpoints" / "resume" / "checkpoint_last.pt"
    assert f"resuming from {last}" in rerun.output
    assert re.search(rf"Loaded checkpoint {re.escape(str(last))} \(epoch \d+ @ {at_kill} updates\)", rerun.output)
    resumed = sorted(train_inner(rerun.output))
    # Every update after the checkpoint is trained exactly once more: none lost, none repeated.
    assert resumed == list(range(at_kill + 1, RESUME_MAX_UPDATE + 1)), resumed[:5]
    assert max(killed_updates) >= at_kill  # the killed run had got that far
    assert f"Stopping training due to num_updates: {RESUME_MAX_UPDATE} >= max_update: {RESUME_MAX_UPDATE}" in rerun.output
    assert num_updates(load_checkpoint(last)) == RESUME_MAX_UPDATE
    # The log kept both runs.
    log = (recipe_runs.dir / "logs" / "train-resume.log").read_text()
    assert log.count("== train.sh ") == 2


def fake_data_bin(tmp_path):
    data = tmp_path / "data-bin"
    data.mkdir()
    (data / ".done").write_text("fake\n")
    (data / "dict.txt").write_text("the 10\n")
    return data


@pytest.mark.parametrize("gpus, nnodes, update_freq", [(1, 1, 24), (8, 1, 3), (4, 2, 3), (24, 1, 1)])
def test_update_freq_keeps_73728_tokens_per_update_for_any_gpu_count(tmp_path, outside, gpus, nnodes, update_freq):
    run = run_recipe("train.sh", outside, "wt103", timeout=60, DRY_RUN=1, GPUS=gpus, NNODES=nnodes,
                     DATA_BIN=fake_data_bin(tmp_path)).check()
    assert f"--max-tokens 3072 --update-freq {update_freq}: 73728 tokens per update" in run.output
    assert "--update-freq " + str(update_freq) in run.output and "warning" not in run.output
    command = run.output.split("== command:")[1]
    if gpus * nnodes == 1:
        assert "fairseq-train" in command and "--distributed-world-size 1" in command and "torchrun" not in command
    else:
        assert f"torchrun --nnodes {nnodes} --node_rank 0 --nproc_per_node {gpus}" in command
        assert f"--distributed-world-size {gpus * nnodes}" in command
    assert "--fp16" in command and "--tokens-per-sample 3072" in command and "--lr-period-updates 270000" in command
    assert not (outside / "wt103" / "checkpoints").exists()


def test_gpu_count_that_cannot_keep_the_batch_is_refused_unless_update_freq_is_given(tmp_path, outside):
    data = fake_data_bin(tmp_path)
    refused = run_recipe("train.sh", outside, "wt103", timeout=60, DRY_RUN=1, GPUS=8, NNODES=2, DATA_BIN=data)
    assert refused.returncode != 0
    assert "BATCH_TOKENS=73728 tokens per update is not a whole number of batches of MAX_TOKENS=3072 on 16 device(s)" in refused.output
    forced = run_recipe("train.sh", outside, "wt103", timeout=60, DRY_RUN=1, GPUS=8, NNODES=2, NODE_RANK=1,
                        MASTER_ADDR="node0", UPDATE_FREQ=2, DATA_BIN=data).check()
    assert "--update-freq 2: 98304 tokens per update" in forced.output
    assert "warning: 98304 tokens per update, not BATCH_TOKENS=73728" in forced.output
    assert "--node_rank 1" in forced.output and "--master_addr node0" in forced.output


def test_unbinarized_data_is_refused_before_anything_is_written(tmp_path, outside):
    run = run_recipe("train.sh", outside, "wt103", timeout=60, SMOKE=1, DATA_BIN=tmp_path / "nothing")
    assert run.returncode != 0
    assert f"{tmp_path / 'nothing'} is not binarized data (no .done marker): run binarize.sh first" in run.output
    assert not (outside / "wt103").exists()


@pytest.mark.e2e
def test_unknown_arch_fails_naming_it_and_writes_no_checkpoint(recipe_runs):
    recipe_runs.get("data")["binarize"].check()
    run = recipe_runs.run("train.sh", SMOKE=1, ARCH="transformer_lm_urpe_wiki104", RUN_NAME="unknown")
    assert run.returncode != 0
    assert "train.sh: error: unknown ARCH=transformer_lm_urpe_wiki104: fairseq-train (with --user-dir fairseq_urpe) has no such --arch" in run.output
    assert "transformer_lm_urpe_wiki103" in run.output.split("unknown ARCH=")[1]  # the known ones are listed
    assert not (recipe_runs.dir / "checkpoints" / "unknown").exists()
    assert not (recipe_runs.dir / "tensorboard" / "unknown").exists()


@pytest.mark.e2e
def test_truncated_checkpoint_last_is_replaced_by_the_newest_intact_checkpoint(recipe_runs, tmp_path):
    """fairseq copies checkpoint_last.pt non-atomically; train.sh runs checkpoint_last_intact.py first."""
    recipe_runs.get("distributed").check()
    save = tmp_path / "save"
    shutil.copytree(recipe_runs.dir / "checkpoints" / "distributed", save)
    last, newest = save / "checkpoint_last.pt", save / "checkpoint_1_40.pt"
    intact = subprocess.run([sys.executable, str(RECIPES / "checkpoint_last_intact.py"), str(save)],
                            capture_output=True, text=True)
    assert intact.returncode == 0 and intact.stdout == ""  # an intact one is left alone

    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])
    newest.touch()  # the newest by time
    repaired = subprocess.run([sys.executable, str(RECIPES / "checkpoint_last_intact.py"), str(save)],
                              capture_output=True, text=True)
    assert repaired.returncode == 0, repaired.stderr
    assert "resuming from checkpoint_1_40.pt" in repaired.stdout
    assert last.read_bytes() == newest.read_bytes()
    assert num_updates(torch.load(last, map_location="cpu", weights_only=False)) == SMOKE_MAX_UPDATE
    assert len(list(save.glob("checkpoint_last.pt.broken-*"))) == 1

    for path in save.glob("checkpoint_*_*.pt"):
        path.unlink()
    last.write_bytes(data[:1000])
    stuck = subprocess.run([sys.executable, str(RECIPES / "checkpoint_last_intact.py"), str(save)],
                           capture_output=True, text=True)
    assert stuck.returncode == 1 and f"delete {last} to start afresh" in stuck.stderr
    assert last.stat().st_size == 1000  # left for a person to decide


@pytest.mark.e2e
def test_rpe_init_zero_reaches_fairseq_train_and_the_checkpoint_and_alibi_is_the_default(recipe_runs):
    zero = recipe_runs.get("zero_start").check()
    assert "  RPE_INIT=zero" in zero.output
    assert (f"== bias start: {URPE} (--rpe-kind t5) learns its bias b, started flat, b = 0 (RPE_INIT=zero, "
            "--rpe-init zero)") in zero.output
    assert " --rpe-init zero " in zero.output.split("== command:")[1]
    checkpoint = load_checkpoint(smoke_dir(recipe_runs, "zero-start") / "checkpoint_last.pt")
    assert num_updates(checkpoint) == ZERO_START_MAX_UPDATE
    assert checkpoint["cfg"]["model"]["rpe_init"] == "zero"

    baselines = recipe_runs.get("baselines").check()  # no RPE_INIT given: today's start, ALiBi's line
    assert "  RPE_INIT=alibi" in baselines.output
    assert (f"== bias start: {URPE} (--rpe-kind t5) learns its bias b, started on ALiBi's line -m_h|k| "
            "(RPE_INIT=alibi, --rpe-init alibi)") in baselines.output
    assert "== bias start: transformer_lm_wiki103 is fairseq's own arch, without a relative bias; RPE_INIT does not apply" \
        in baselines.output
    default = load_checkpoint(smoke_dir(recipe_runs, f"{URPE}-smoke") / "checkpoint_last.pt")
    assert default["cfg"]["model"]["rpe_init"] == "alibi"
    stock = load_checkpoint(smoke_dir(recipe_runs, "transformer_lm_wiki103-smoke") / "checkpoint_last.pt")
    assert "rpe_init" not in stock["cfg"]["model"]  # fairseq's own arch is not given the plugin's flag


def test_rpe_init_of_a_fixed_bias_changes_nothing_and_a_bad_value_is_refused_naming_the_knob(tmp_path, outside):
    data = fake_data_bin(tmp_path)
    alibi = run_recipe("train.sh", outside, "wt103", timeout=120, DRY_RUN=1, GPUS=1, DATA_BIN=data, RPE_INIT="zero",
                       ARCH="transformer_lm_urpe_alibi_wiki103").check()
    assert ("== bias start: transformer_lm_urpe_alibi_wiki103 (--rpe-kind alibi) has no learned bias b; RPE_INIT=zero "
            "changes nothing") in alibi.output
    bad = run_recipe("train.sh", outside, "wt103-bad", timeout=60, DRY_RUN=1, GPUS=1, DATA_BIN=data, RPE_INIT="ALiBi")
    assert bad.returncode != 0
    assert ("train.sh: error: RPE_INIT must be alibi (the learned bias starts on ALiBi's line) or zero (flat), "
            "got RPE_INIT=ALiBi") in bad.output
    assert "== command:" not in bad.output and not (outside / "wt103-bad").exists()  # refused before anything is written
