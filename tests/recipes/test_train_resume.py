"""train.sh: resuming is a property of the run, not of the machine (two CPU processes for real; 2 x 8 GPUs,
fewer GPUs and another node count emulated: a checkpoint saved with the configuration fairseq parses from
that command, then the rerun's checks); one training per run folder (a lock naming its holder, a stale lock
replaced); SIGTERM to train.sh stops torchrun and its ranks; one log per node; the newest intact checkpoint
by its stored update count; the free-space pre-flight."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.checkpoints import load_checkpoint, num_updates

from .conftest import DISTRIBUTED_KNOBS, RECIPES, SMOKE_MAX_UPDATE, recipe_env, run_recipe, train_inner
from .dry_run import dry_run, python_here, python_side, train_args

TWO_NODES = dict(GPUS=8, NNODES=2, MASTER_ADDR="node0")


@pytest.fixture
def full_dry_run(outside, full_size_data, stand_in_python):
    return lambda **knobs: dry_run("train.sh", outside, full_size_data, stand_in_python, **knobs)


def save_as_fairseq_would(output, save_dir, updates, name="checkpoint_last.pt"):
    """A checkpoint of the run whose DRY_RUN printed ``output``: the cfg fairseq-train builds from that command
    (what a run on those GPUs stores), at ``updates`` updates, without weights."""
    cfg = python_side("launch_training").plain_config(train_args(output))
    save_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"cfg": cfg, "model": {}, "optimizer_history": [{"num_updates": updates}],
                "extra_state": {"previous_training_time": 3600.0}}, save_dir / name)
    return cfg


@pytest.mark.e2e
def test_rerun_of_a_two_process_run_exits_0_as_finished_and_so_does_one_process(recipe_runs, stand_in_python):
    """The CPU_PROCS=2 command run twice for real: the second finds the run finished. The same run from one
    process (--update-freq 2 instead of 1, the same 512 tokens per update) is the same run, finished too."""
    runs = recipe_runs.get("distributed")
    runs["train"].check()
    last = recipe_runs.dir / "checkpoints" / "distributed" / "checkpoint_last.pt"
    finished = f"== finished: {last} is at update {SMOKE_MAX_UPDATE} of MAX_UPDATE={SMOKE_MAX_UPDATE}"
    assert runs["rerun"].returncode == 0, runs["rerun"].output[-3000:]
    assert finished in runs["rerun"].output and "Loaded checkpoint" not in runs["rerun"].output
    one = python_here("train.sh", recipe_runs.cwd, recipe_runs.wt103, stand_in_python, **dict(DISTRIBUTED_KNOBS, CPU_PROCS=1))
    assert one.returncode == 0, one.output[-3000:]
    assert finished in one.output and "--update-freq 2: 512 tokens per update" in one.output


@pytest.mark.e2e
def test_a_two_process_run_resumes_in_one_process_for_real_and_trains_to_its_end(recipe_runs, tmp_path):
    """The two-process run's checkpoint at update 20 as checkpoint_last.pt, then train.sh with one process
    (--update-freq 2, the same 512 tokens per update): fairseq loads it and trains updates 21 to 40."""
    recipe_runs.get("distributed")["train"].check()
    save = tmp_path / "save"
    save.mkdir()
    shutil.copyfile(recipe_runs.dir / "checkpoints" / "distributed" / "checkpoint_1_20.pt", save / "checkpoint_last.pt")
    run = run_recipe("train.sh", recipe_runs.cwd, recipe_runs.wt103, **dict(DISTRIBUTED_KNOBS, CPU_PROCS=1, SAVE_DIR=save,
                                                                          LOG_INTERVAL=1)).check()
    assert f"== resuming from {save}/checkpoint_last.pt (update 20 of {SMOKE_MAX_UPDATE})" in run.output
    assert f"Loaded checkpoint {save}/checkpoint_last.pt (epoch" in run.output and "@ 20 updates)" in run.output
    assert sorted(train_inner(run.output)) == list(range(21, SMOKE_MAX_UPDATE + 1))
    assert num_updates(load_checkpoint(save / "checkpoint_last.pt")) == SMOKE_MAX_UPDATE


def test_a_run_saved_on_2x8_gpus_resumes_on_each_node_and_on_other_gpu_counts_keeping_its_batch(full_dry_run, tmp_path):
    save = tmp_path / "save"
    first = full_dry_run(BATCH_TOKENS=98304, SAVE_DIR=save, **TWO_NODES).check()
    cfg = save_as_fairseq_would(first.output, save, 1000)
    assert cfg["distributed_training"]["distributed_world_size"] == 16 and cfg["optimization"]["update_freq"] == [2]
    resuming = f"== resuming from {save}/checkpoint_last.pt (update 1000 of 286000)"
    for knobs in (TWO_NODES, dict(TWO_NODES, NODE_RANK=1), dict(GPUS=8), dict(GPUS=4), dict(GPUS=4, NNODES=4,
                                                                                         MASTER_ADDR="node0")):
        rerun = full_dry_run(BATCH_TOKENS=98304, SAVE_DIR=save, **knobs)
        assert rerun.returncode == 0 and resuming in rerun.output, (knobs, rerun.output[-2000:])
    other = full_dry_run(BATCH_TOKENS=73728, SAVE_DIR=save, GPUS=8)
    assert other.returncode == 1
    assert "BATCH_TOKENS (--max-tokens x devices x --update-freq): saved 98304, now 73728" in other.output


def test_a_run_on_fewer_gpus_than_the_machine_has_resumes(full_dry_run, tmp_path):
    """GPUS=4 where more are visible: the world size compared is the run's, never fairseq's default (the
    machine's GPU count)."""
    save = tmp_path / "save"
    save_as_fairseq_would(full_dry_run(GPUS=4, SAVE_DIR=save).check().output, save, 2000)
    for gpus in (4, 8, 2):
        rerun = full_dry_run(GPUS=gpus, SAVE_DIR=save, CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
        assert rerun.returncode == 0, rerun.output[-2000:]
        assert f"== resuming from {save}/checkpoint_last.pt (update 2000 of 286000)" in rerun.output


def test_second_launch_into_a_running_folder_is_refused_naming_the_first_and_a_stale_lock_is_replaced(
        outside, full_size_data, stand_in_python, tmp_path):
    save = tmp_path / "save"
    save.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "launch_training"])
    try:
        lock = save / "train.lock"
        lock.write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(), "started": "2026-01-01T00:00:00Z"}))
        for dry in (1, 0):
            second = python_here("train.sh", outside, full_size_data, stand_in_python, GPUS=8, SAVE_DIR=save, DRY_RUN=dry)
            assert second.returncode == 1, second.output[-2000:]
            assert (f"train.sh: error: {lock}: this run is being trained already by pid {holder.pid} on "
                    f"{socket.gethostname()}, started 2026-01-01T00:00:00Z (it is still running)") in second.output
        assert json.loads(lock.read_text())["pid"] == holder.pid  # left to its holder
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone: its lock is stale, replaced saying so (a DRY_RUN checks without taking it).
    stale = python_here("train.sh", outside, full_size_data, stand_in_python, GPUS=8, SAVE_DIR=save, DRY_RUN=1)
    assert stale.returncode == 0, stale.output[-2000:]
    other_host = {"pid": 1, "host": "node7", "started": "2026-01-01T00:00:00Z"}
    lock.write_text(json.dumps(other_host))
    refused = python_here("train.sh", outside, full_size_data, stand_in_python, GPUS=8, SAVE_DIR=save, DRY_RUN=1)
    assert refused.returncode == 1
    assert (f"{lock}: this run is being trained already by pid 1 on node7, started 2026-01-01T00:00:00Z (it is on "
            f"another host, so this one cannot tell whether it still runs; if that job is gone, remove {lock})"
            ) in refused.output
    run_lock = python_side("run_lock")
    lock.write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(), "started": "x"}))
    notes = []
    assert run_lock.acquire(str(lock), notes.append) is None  # the stale lock replaced by this process's
    assert json.loads(lock.read_text())["pid"] == os.getpid() and "a stale lock" in notes[0]
    run_lock.release(str(lock))
    assert not lock.exists()
    assert run_lock.lock_path("d", 0) == "d/train.lock" and run_lock.lock_path("d", 2) == "d/train.node2.lock"


def test_each_node_logs_to_a_file_of_its_own(full_dry_run):
    zero = full_dry_run(BATCH_TOKENS=98304, **TWO_NODES).check()
    one = full_dry_run(BATCH_TOKENS=98304, NODE_RANK=1, **TWO_NODES).check()
    run = "transformer_lm_urpe_wiki103-L3072-batch98304-init_zero-seed1-words-fp16"
    assert f"/logs/train-{run}.log)" in zero.output and f"/logs/train-{run}.node1.log)" in one.output


FAKE_TRAIN = """import os, sys, time
open(os.path.join(os.environ["RANK_PIDS"], os.environ["RANK"]), "w").write(str(os.getpid()))
time.sleep(300)
"""


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] == "Z"  # a zombie: ended, not yet reaped by its parent


def test_sigterm_to_train_sh_stops_torchrun_and_every_rank(tmp_path, full_size_data):
    """train.sh on 2 'GPUs' through the real torchrun, whose ranks run a stand-in fairseq_cli.train (each records
    its pid and sleeps); SIGTERM to train.sh alone (not its process group) leaves no process behind, and the
    run's lock is released."""
    env_dir = tmp_path / "env" / "bin"
    env_dir.mkdir(parents=True)
    (env_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (env_dir / "fairseq-train").write_text("#!/bin/sh\nexit 0\n")
    fake = tmp_path / "fake" / "fairseq_cli"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "train.py").write_text(FAKE_TRAIN)
    torchrun = Path(sys.executable).parent / "torchrun"
    (env_dir / "torchrun").write_text(f'#!/usr/bin/env bash\nPYTHONPATH={fake.parent} exec {torchrun} "$@"\n')
    for path in env_dir.iterdir():
        path.chmod(0o755)
    pids = tmp_path / "pids"
    pids.mkdir()
    save = tmp_path / "save"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = recipe_env(full_size_data, GPUS=2, BATCH_TOKENS=6144, SAVE_DIR=save, MASTER_PORT=0,
                     URPE_VENV=env_dir.parent)
    env.update(RANK_PIDS=str(pids), PYTHONPATH=str(Path(RECIPES).parents[1]))
    log = tmp_path / "train.out"
    with open(log, "w") as out:
        train = subprocess.Popen(["bash", str(RECIPES / "train.sh")], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        start = time.time()
        while len(list(pids.iterdir())) < 2 and time.time() - start < 120 and train.poll() is None:
            time.sleep(0.2)
        assert len(list(pids.iterdir())) == 2, log.read_text()[-3000:]
        assert (save / "train.lock").exists()
        ranks = [int(p.read_text()) for p in pids.iterdir()]
        torchrun_pids = [int(p) for p in subprocess.run(["pgrep", "-P", str(train.pid)], capture_output=True,
                                                         text=True).stdout.split()]
        train.send_signal(signal.SIGTERM)
        assert train.wait(timeout=90) == 128 + signal.SIGTERM, log.read_text()[-3000:]
        deadline = time.time() + 30
        while not all(gone(pid) for pid in ranks + torchrun_pids) and time.time() < deadline:
            time.sleep(0.2)
        assert torchrun_pids and all(gone(pid) for pid in ranks + torchrun_pids), log.read_text()[-3000:]
        assert not (save / "train.lock").exists()
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
        for p in pids.iterdir():
            try:
                os.kill(int(p.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_sigterm_whose_note_finds_no_reader_still_stops_a_run_inside_a_logging_call(monkeypatch):
    """A SIGTERM to train.sh's process group (a killed job) stops the log's ``tee`` as well, so the handler's note
    meets a pipe without a reader. Landing inside fairseq's logging (a StreamHandler's write, here its flush),
    the handler must still end the run: a BrokenPipeError in place of its SystemExit would be swallowed by
    logging's handleError, and the training would run on to its last update."""
    import io
    import logging

    launch = python_side("launch_training")
    read, write = os.pipe()
    os.close(read)
    broken = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stderr", broken)
    monkeypatch.setattr(launch, "CHILDREN", [])

    class SignalledWhileWriting(logging.StreamHandler):
        def flush(self):
            launch.on_sigterm(signal.SIGTERM, None)

    logger = logging.getLogger("test_sigterm_in_logging")
    logger.propagate = False
    handler = SignalledWhileWriting(io.StringIO())
    logger.addHandler(handler)
    try:
        with pytest.raises(SystemExit) as stopped:
            logger.warning("epoch 001: 21 / 51 loss=9.184")
        assert stopped.value.code == 128 + signal.SIGTERM
    finally:
        logger.removeHandler(handler)
        try:
            broken.close()
        except BrokenPipeError:
            pass


@pytest.mark.e2e
def test_truncated_checkpoint_last_with_a_newer_intact_best_resumes_from_best(recipe_runs, tmp_path):
    """A kill -9 during fairseq's copy best -> last at the end of an epoch: checkpoint_last.pt is truncated and
    checkpoint_best.pt is the newest state (its stored update count), newer than any interval file."""
    recipe_runs.get("distributed")["train"].check()
    intact = python_side("checkpoint_last_intact")
    save = tmp_path / "save"
    shutil.copytree(recipe_runs.dir / "checkpoints" / "distributed", save)
    last, best = save / "checkpoint_last.pt", save / "checkpoint_best.pt"
    for path in save.glob("checkpoint_*_*.pt"):
        path.unlink()
    older = save / "checkpoint_1_20.pt"  # an interval file of an earlier update, newer by its time
    state = load_checkpoint(best)
    state["optimizer_history"][-1]["num_updates"] = 20
    torch.save(state, older)
    assert num_updates(load_checkpoint(best)) == SMOKE_MAX_UPDATE
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])
    assert intact.stored_updates(str(last)) is None and intact.newest_intact(str(save)) == str(best)
    assert intact.main(str(save)) == 0
    assert last.read_bytes() == best.read_bytes() and num_updates(load_checkpoint(last)) == SMOKE_MAX_UPDATE
    assert [p.stat().st_size for p in save.glob("checkpoint_last.pt.broken-*")] == [len(data) // 2]  # kept

    # An intact checkpoint_last.pt older than an interval file (the copy onto it never happened): the newer one.
    torch.save(dict(state, optimizer_history=[dict(state["optimizer_history"][-1], num_updates=60)]), save / "checkpoint_2_60.pt")
    assert intact.main(str(save)) == 0 and num_updates(load_checkpoint(last)) == 60


def test_a_truncated_only_copy_is_never_advised_deleted(tmp_path):
    intact = python_side("checkpoint_last_intact")
    save = tmp_path / "save"
    save.mkdir()
    torch.save({"optimizer_history": [{"num_updates": 7}]}, save / "checkpoint_last.pt")
    data = (save / "checkpoint_last.pt").read_bytes()
    (save / "checkpoint_last.pt").write_bytes(data[:100])
    (save / "checkpoint_best.pt").write_bytes(data[:50])  # truncated too
    stuck = subprocess.run([sys.executable, str(RECIPES / "checkpoint_last_intact.py"), str(save)], capture_output=True,
                           text=True)
    assert stuck.returncode == 1
    assert f"to start afresh, move it aside (mv {save}/checkpoint_last.pt {save}/checkpoint_last.pt.broken)" in stuck.stderr
    assert "delete" not in stuck.stderr.lower() and (save / "checkpoint_last.pt").stat().st_size == 100
    assert intact.newest_intact(str(save)) is None


def test_a_disk_without_room_for_the_runs_checkpoints_is_named_before_anything_starts(full_dry_run, monkeypatch):
    """The pre-flight: about 245M parameters x 6 bytes (fp16 weights, fp32 momentum) a checkpoint, 5 files
    (last, best, 2 interval files and the next save); a disk with less free is refused naming it."""
    fits = full_dry_run(GPUS=8).check()
    assert "the run's checkpoints need 7.37 GB more (5 files of 1.47 GB, about 245.7M parameters x 6 bytes" in fits.output
    usage = shutil.disk_usage("/")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=3 * 10**9))
    full = full_dry_run(GPUS=8)
    assert full.returncode == 1
    assert "train.sh: error: not enough disk for the run's checkpoints: 3.00 GB free under" in full.output
    assert "7.37 GB needed (above); a full disk truncates checkpoint_last.pt while fairseq copies a save onto it" in full.output
