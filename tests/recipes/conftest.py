"""Fixtures for the recipe tests: the real scripts of examples/wikitext103, run as subprocesses on the
WikiText-format fixture (fixtures/wikitext-103, made by fixtures/make_wikitext_fixture.py).

The expensive runs (binarizing, training, evaluating) are started once per session by ``recipe_runs``,
two at a time in the background, in the order the tests need them; each test waits for the runs it
uses. Every script runs with ``OMP_NUM_THREADS=1`` (see tests/cli/conftest.py: more threads per process
are many times slower on two busy cores), from a working directory outside the repository, with the
environment of the interpreter running pytest (``URPE_VENV``). Dry runs of full-size settings run their
Python side in this process (``dry_run.py``) on ``full_size_data``, data-bin folders with WikiText-103's
dictionary size.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import pytest

from fairseq_urpe.fairseq_runs import simple_records

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "examples" / "wikitext103"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "wikitext-103"
SMOKE_MAX_TOKENS = 256  # train.sh's SMOKE defaults: --max-tokens, tokens per update, updates
SMOKE_BATCH_TOKENS = 512
SMOKE_MAX_UPDATE = 40
PIPELINE_ARCHS = ("transformer_lm_urpe_wiki103", "transformer_lm_wiki103")
# run_baselines.sh's run names of PIPELINE_ARCHS (the recipes' RPE_INIT default, zero; CPU: fp32)
PIPELINE_RUNS = ("transformer_lm_urpe_wiki103-L64-batch512-init_zero-seed1-words-fp32-smoke",
                 "transformer_lm_wiki103-L64-batch512-seed1-words-fp32-smoke")
DISTRIBUTED_KNOBS = dict(SMOKE=1, CPU_PROCS=2, ARCH="transformer_lm_urpe_wiki103", RUN_NAME="distributed")
RESUME_MAX_UPDATE = 40  # the resume test: a run killed after its first checkpoint, then rerun
RESUME_SAVE_INTERVAL = 20
RESUME_KNOBS = dict(SMOKE=1, ARCH=PIPELINE_ARCHS[0], RUN_NAME="resume", MAX_UPDATE=RESUME_MAX_UPDATE,
                    SAVE_INTERVAL_UPDATES=RESUME_SAVE_INTERVAL, LOG_INTERVAL=1)
BPE_VOCAB = 500
WIKITEXT103_DICT = 267_744  # symbols of fairseq's dictionary of WikiText-103 (dict.txt + 4 special)


KNOBS = ("ARCH", "ARCHS", "SWEEP", "SMOKE", "CPU_PROCS", "GPUS", "RUN_NAME", "BPE", "VOCAB", "DATA_BIN", "RAW_DIR",
         "SAVE_DIR", "LOG_DIR", "TENSORBOARD_DIR", "CHECKPOINT", "RESULTS_DIR", "TABLE_DIR", "FORCE", "UPDATE_FREQ",
         "MAX_UPDATE", "WARMUP_UPDATES", "LR", "LR_PERIOD_UPDATES", "SEED", "TOKENS_PER_SAMPLE", "MAX_TOKENS",
         "BATCH_TOKENS", "PRECISION", "EVAL_PRECISION", "ATTENTION_IMPL", "RPE_INIT", "EXTRA_ARGS", "WIKITEXT_DIR",
         "MIRRORS", "EXPECTED_SIZE", "EXPECTED_SHA256", "DOWNLOAD_DIR", "SRCDICT", "DRY_RUN", "CHECK_COMMAND_FILE", "NNODES", "NODE_RANK",
         "MASTER_ADDR", "MASTER_PORT", "GPU_PEAK_TFLOPS", "SPLITS", "CONTEXT_WINDOW", "EXTRAPOLATE", "SMOKE_EVAL_TOKENS", "PROTOCOLS", "CPU",
         "SAVE_INTERVAL_UPDATES", "KEEP_INTERVAL_UPDATES", "LOG_INTERVAL", "NUM_WORKERS", "WORKERS")


@dataclass
class Run:
    cmd: str
    returncode: int
    output: str  # stdout and stderr together, in order
    seconds: float

    def check(self) -> "Run":
        if self.returncode != 0:
            raise AssertionError(f"{self.cmd} failed with exit code {self.returncode}:\n{self.output[-5000:]}")
        return self


def recipe_env(wt103_dir, **knobs) -> Dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               URPE_VENV=sys.prefix, WT103_DIR=str(wt103_dir))
    for name in KNOBS:
        env.pop(name, None)  # knobs from the caller's shell must not leak into the tests
    env.update({k: str(v) for k, v in knobs.items()})
    return env


def run_recipe(script: str, cwd: Path, wt103_dir, timeout: float = 300, **knobs) -> Run:
    """``bash examples/wikitext103/<script>`` with the given knobs, from ``cwd``."""
    start = time.time()
    proc = subprocess.run(["bash", str(RECIPES / script)], cwd=cwd, env=recipe_env(wt103_dir, **knobs),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    knob_text = " ".join(f"{k}={v}" for k, v in knobs.items())
    return Run(f"{knob_text} bash {script}", proc.returncode, proc.stdout, time.time() - start)


def run_killed_after_first_checkpoint(script: str, cwd: Path, wt103_dir, log: Path, **knobs) -> Run:
    """Start a recipe in its own process group, and kill the whole group (SIGTERM) as soon as fairseq
    reports its first saved checkpoint."""
    start = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", str(RECIPES / script)], cwd=cwd, env=recipe_env(wt103_dir, **knobs),
                                stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            while proc.poll() is None and time.time() - start < 300:
                if "| Saved checkpoint " in log.read_text():
                    os.killpg(proc.pid, signal.SIGTERM)
                    break
                time.sleep(0.1)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return Run(f"{script} (killed)", proc.returncode, log.read_text(), time.time() - start)


class RecipeRuns:
    """The session's expensive recipe runs, two at a time in the background."""

    def __init__(self, root: Path):
        self.root = root
        self.cwd = root / "cwd"  # scripts run from here, with WT103_DIR given relative to it
        self.cwd.mkdir()
        self.wt103 = "wt103"
        self.dir = self.cwd / self.wt103
        self._pool = ThreadPoolExecutor(max_workers=2)
        self._jobs = {}
        self._submit("data", self._data)
        self._submit("baselines", self._baselines)
        self._submit("distributed", self._distributed)
        self._submit("resume", self._resume)
        self._submit("bpe", self._bpe)

    def _submit(self, name, fn):
        self._jobs[name] = self._pool.submit(fn)

    def get(self, name):
        return self._jobs[name].result()

    def run(self, script, **knobs) -> Run:
        return run_recipe(script, self.cwd, self.wt103, **knobs)

    def _data(self):
        prepare = self.run("prepare.sh", WIKITEXT_DIR=FIXTURE)
        binarize = self.run("binarize.sh", WORKERS=1) if prepare.returncode == 0 else prepare
        return {"prepare": prepare, "binarize": binarize}

    def _baselines(self):
        self.get("data")["binarize"].check()
        return self.run("run_baselines.sh", timeout=900, SMOKE=1, ARCHS=" ".join(PIPELINE_ARCHS))

    def _distributed(self):
        """Two CPU processes train the pipeline's URPE run; then the same command again (finished: exits 0)."""
        self.get("data")["binarize"].check()
        train = self.run("train.sh", **DISTRIBUTED_KNOBS)
        rerun = self.run("train.sh", **DISTRIBUTED_KNOBS) if train.returncode == 0 else train
        return {"train": train, "rerun": rerun}

    def _resume(self):
        self.get("data")["binarize"].check()
        killed = run_killed_after_first_checkpoint("train.sh", self.cwd, self.wt103, self.root / "resume-killed.log",
                                                   **RESUME_KNOBS)
        at_kill = None
        last = self.dir / "checkpoints" / "resume" / "checkpoint_last.pt"
        if last.exists():
            at_kill = self.root / "checkpoint_last_at_kill.pt"
            at_kill.write_bytes(last.read_bytes())
        rerun = self.run("train.sh", **RESUME_KNOBS)
        return {"killed": killed, "at_kill": at_kill, "rerun": rerun}

    def _bpe(self):
        self.get("data")["prepare"].check()
        knobs = dict(BPE="sentencepiece", VOCAB=BPE_VOCAB)
        binarize = self.run("binarize.sh", WORKERS=1, **knobs)
        if binarize.returncode:
            return {"binarize": binarize}
        train = self.run("train.sh", SMOKE=1, ARCH=PIPELINE_ARCHS[0], RUN_NAME="bpe", MAX_UPDATE=12, WARMUP_UPDATES=2, **knobs)
        evaluate = (self.run("eval.sh", RUN_NAME="bpe", SPLITS="test", EXTRAPOLATE="1", PROTOCOLS="sliding", **knobs)
                    if train.returncode == 0 else train)
        return {"binarize": binarize, "train": train, "eval": evaluate}

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)

    def durations(self) -> str:
        """Seconds of each finished run, for the session's log (pytest -s shows it)."""
        parts = []
        for name, job in self._jobs.items():
            if job.done() and not job.cancelled() and not job.exception():
                result = job.result()
                runs = result.items() if isinstance(result, dict) else [("", result)]
                parts += [f"{name}{'/' + key if key else ''} {run.seconds:.0f}s" for key, run in runs if isinstance(run, Run)]
        return ", ".join(parts)


@pytest.fixture(scope="session")
def recipe_runs(tmp_path_factory):
    runs = RecipeRuns(tmp_path_factory.mktemp("recipes"))
    yield runs
    runs.close()
    print(f"\nrecipe runs: {runs.durations()}")


@pytest.fixture(scope="session")
def stand_in_python(tmp_path_factory) -> Path:
    """An environment whose python records the command a script ends with (dry_run.py)."""
    from .dry_run import stand_in_environment

    return stand_in_environment(tmp_path_factory.mktemp("stand-in-env"))


@pytest.fixture(scope="session")
def full_size_data(tmp_path_factory) -> Path:
    """A WT103_DIR whose data-bin folders have the dictionaries of the full-size runs: wikitext-103
    (WikiText-103's 267,744 symbols; with valid and test splits of three lines, one of 700 tokens, for
    eval.sh's dry runs) and wikitext-103-spm32000 (a 32,000-piece SentencePiece dictionary)."""
    import torch
    from fairseq.data import indexed_dataset

    root = tmp_path_factory.mktemp("full-size")
    for name, symbols in (("wikitext-103", WIKITEXT103_DICT), ("wikitext-103-spm32000", 32004)):
        data = root / "data-bin" / name
        data.mkdir(parents=True)
        (data / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(symbols - 4)))
        (data / ".done").write_text("a stand-in: dictionary only\n")
    words = {}
    for split in ("valid", "test"):
        data = root / "data-bin" / "wikitext-103"
        builder = indexed_dataset.make_builder(str(data / f"{split}.bin"), impl="mmap", vocab_size=WIKITEXT103_DICT)
        for length in (10, 700, 30):
            builder.add_item(torch.arange(4, 4 + length, dtype=torch.int32))
        builder.finalize(str(data / f"{split}.idx"))
        words[split] = {"words": 740, "lines": 3}
    (root / "data-bin" / "wikitext-103" / "words.json").write_text(json.dumps(words))
    return root


@pytest.fixture
def outside(tmp_path) -> Path:
    """An empty working directory outside the repository, for the quick script runs."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return cwd


def train_inner(log: str) -> Dict[int, dict]:
    """``{num_updates: {"loss": str, "wpb": float}}`` of fairseq-train's train_inner lines."""
    return {int(r["num_updates"]): {"loss": r["loss"], "wpb": float(r["wpb"])} for r in simple_records(log)}


def last_match(pattern: str, text: str) -> Optional[re.Match]:
    matches = list(re.finditer(pattern, text, re.M))
    return matches[-1] if matches else None
