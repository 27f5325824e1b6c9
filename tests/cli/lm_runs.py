"""What the end-to-end tests share: their command lines, the trainings every test module reads (the
session-scoped ``trainings`` fixture of conftest.py starts them) and the parsing of generated text.
The tests themselves: test_train.py, test_resume.py, test_eval_lm.py, test_sampling.py, test_hub.py,
test_bad_input.py.

Every model is trained once per session, in the background, by the ``trainings`` fixture (two
``fairseq-train`` processes at a time); the tests wait for the runs they need and assert on real
outputs: logs, perplexities, generated text and the saved checkpoints.

fairseq quirks these tests work around (each is explained where it is used):
  * ``--required-batch-size-multiple 1``: with the default of 8, fairseq's ``batch_by_size`` silently
    drops the last blocks of every split that do not fill a multiple of 8 (6 of the 38 validation
    blocks here), in training *and* validation. With 1, the validation loss fairseq-train logs covers
    the whole split and can be compared with fairseq-eval-lm's.
  * ``--arch transformer_lm`` is the model's dataclass defaults, not ``base_lm_architecture`` (which
    the plugin's archs and fairseq's other ``transformer_lm_*`` archs apply): ``--decoder-input-dim``
    and ``--decoder-output-dim`` stay 512 whatever ``--decoder-embed-dim`` says (the "tiny" stock model
    gets 512-wide embeddings with projections: 4.6M instead of 0.45M parameters), and the layers are
    post-norm without a final layer norm. The stock run passes ``--decoder-input-dim 64
    --decoder-output-dim 64 --decoder-normalize-before`` to get the same layout as the tiny archs.
  * fairseq-eval-lm never fails on inputs longer than a model's ``max_positions``: it skips them with a
    warning and reports the perplexity of what is left (``Perplexity: 1.00`` over 0 tokens when nothing
    is left), so the tests check how many tokens were evaluated.
  * fairseq-train resumed from a checkpoint does not see the same batches as an uninterrupted run
    (see ``test_resume_matches_uninterrupted_training``).
"""

import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from fairseq_urpe.fairseq_runs import Run
from fairseq_urpe.fairseq_runs import eval_lm_result as parse_eval_lm

REPO = Path(__file__).resolve().parents[2]
USER_DIR = str(REPO / "fairseq_urpe")

TPS = 128  # --tokens-per-sample of every training run (except the 'unique' table model)
TRAIN_UPDATES = 24  # batches of <= 2048 tokens: 17 per epoch over the 1500-sentence slice
VALIDATE_EVERY = 8  # validations after 8, 16, 17 (end of epoch 1) and 24 updates
HEADS, BUCKETS = 4, 32  # the tiny archs' heads and the default --rpe-num-buckets
RESUME_N = 4  # test 2: interrupt after N updates, resume to 2N
UNIQUE_MAX_DISTANCE = 16  # test 6
# 'jury' occurs once in the 1500-sentence slice, so --thresholdsrc 2 maps it to <unk>: the prompts use
# words that are in the dictionary (the test checks that) so that "starts with the prompt" is meaningful.
SCORE_SENTENCE = "The committee said ."
PROMPT = "The committee"
INTERACTIVE_PROMPTS = ["The committee said", "It is"]

ARCHS = {
    "urpe": ["--arch", "transformer_lm_urpe_tiny"],
    "rpe": ["--arch", "transformer_lm_rpe_tiny"],
    # fairseq's own transformer_lm with the tiny archs' layout (width 64, ffn 256, 2 layers, 4 heads,
    # pre-norm); see the module docstring for why it needs more flags than --decoder-embed-dim.
    "stock": [
        "--arch", "transformer_lm",
        "--decoder-layers", "2", "--decoder-embed-dim", "64", "--decoder-ffn-embed-dim", "256",
        "--decoder-attention-heads", "4", "--decoder-input-dim", "64", "--decoder-output-dim", "64",
        "--decoder-normalize-before",
    ],
}
MODEL_CLASS = {"urpe": "RelativeTransformerLanguageModel", "rpe": "RelativeTransformerLanguageModel",
               "stock": "TransformerLanguageModel"}
ARCH_NAME = {"urpe": "transformer_lm_urpe_tiny", "rpe": "transformer_lm_rpe_tiny", "stock": "transformer_lm"}


# ----------------------------------------------------------------------------------------------------
# command lines and log parsing


def train_args(data, save_dir, *extra, tps=TPS, max_tokens=2048, log_interval=5, user_dir=True):
    """fairseq-train arguments shared by every run: CPU, deterministic (seed, no dropout), no workers."""
    return [
        data.bin, "--task", "language_modeling", *(["--user-dir", USER_DIR] if user_dir else []),
        "--cpu", "--num-workers", "0", "--seed", "1",
        "--optimizer", "adam", "--lr", "0.002", "--dropout", "0",
        "--tokens-per-sample", tps, "--sample-break-mode", "none",
        "--max-tokens", max_tokens, "--required-batch-size-multiple", "1",
        "--log-format", "simple", "--log-interval", log_interval,
        "--save-dir", save_dir, "--no-epoch-checkpoints", *extra,
    ]


def eval_lm_args(data, checkpoint, *extra, tps=TPS, subset="valid"):
    return [
        data.bin, "--path", checkpoint, "--user-dir", USER_DIR, "--cpu", "--num-workers", "0",
        "--gen-subset", subset, "--sample-break-mode", "none", "--tokens-per-sample", tps,
        "--max-tokens", "4096", *extra,
    ]


@dataclass
class Hypothesis:
    source: Optional[str]
    tokens: List[str]
    score: float
    positional: List[float]


def parse_hypotheses(stdout: str) -> Dict[int, Hypothesis]:
    """fairseq-generate/-interactive's S-/H-/P- lines, by sentence id (nbest 1)."""
    sources, hyps, positional = {}, {}, {}
    for line in stdout.splitlines():
        kind, _, rest = line.partition("-")
        if kind not in ("S", "H", "P") or "\t" not in rest:
            continue
        ident, *fields = rest.split("\t")
        if kind == "S":
            sources[int(ident)] = fields[0]
        elif kind == "H":
            hyps[int(ident)] = (float(fields[0]), fields[1].split() if len(fields) > 1 else [])
        else:
            positional[int(ident)] = [float(x) for x in fields[0].split()]
    assert hyps, f"no H- lines in:\n{stdout[-3000:]}"
    assert positional.keys() == hyps.keys()
    return {i: Hypothesis(sources.get(i), hyps[i][1], hyps[i][0], positional[i]) for i in hyps}


# ----------------------------------------------------------------------------------------------------
# trainings: every fairseq-train run of the session, started once, two at a time


@dataclass
class TrainRun:
    name: str
    save_dir: Path
    result: Run

    @property
    def log(self) -> str:
        return self.result.output

    @property
    def checkpoint(self) -> Path:
        return self.save_dir / "checkpoint_last.pt"


@dataclass
class ResumeRuns:
    save_dir: Path
    first: "object"  # --max-update N
    second: "object"  # same command, --max-update 2N, same --save-dir
    at_n: Path  # copy of checkpoint_last.pt after the first run


class Trainings:
    def __init__(self, cli, data, root: Path):
        self.cli, self.data, self.root = cli, data, root
        self._pool = ThreadPoolExecutor(max_workers=2)
        # Submitted in the order the tests need them.
        self._jobs = {name: self._pool.submit(self._train_model, name) for name in ("urpe", "rpe", "stock")}
        self._jobs["resume"] = self._pool.submit(self._train_interrupted)
        self._jobs["oneshot"] = self._pool.submit(self._train_resume_split, root / "oneshot", 2 * RESUME_N)
        self._jobs["unique"] = self._pool.submit(self._train_unique)

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _train_model(self, name):
        save = self.root / name
        args = train_args(
            self.data, save, *ARCHS[name], "--max-update", TRAIN_UPDATES,
            "--validate-interval-updates", VALIDATE_EVERY, user_dir=name != "stock",
        )
        return TrainRun(name, save, self.cli.run("train", *args))

    def _train_resume_split(self, save, max_update):
        # The 60-sentence split "resume" is one batch per update (see test_resume_matches_...).
        args = train_args(
            self.data, save, *ARCHS["urpe"], "--train-subset", "resume", "--disable-validation",
            "--max-update", max_update, max_tokens=8192, log_interval=1,
        )
        return self.cli.run("train", *args)

    def _train_interrupted(self):
        save = self.root / "interrupted"
        first = self._train_resume_split(save, RESUME_N)
        at_n = self.root / f"checkpoint_at_{RESUME_N}.pt"
        if first.returncode == 0:
            shutil.copy(save / "checkpoint_last.pt", at_n)
            second = self._train_resume_split(save, 2 * RESUME_N)
        else:
            second = first
        return ResumeRuns(save, first, second, at_n)

    def _train_unique(self):
        save = self.root / "unique"
        args = train_args(
            self.data, save, *ARCHS["urpe"], "--urpe-toeplitz", "unique", "--urpe-beyond-max", "error",
            "--urpe-max-distance", UNIQUE_MAX_DISTANCE, "--max-update", "5", tps=16,
        )
        return TrainRun("unique", save, self.cli.run("train", *args))

    def get(self, name):
        return self._jobs[name].result()

    def model(self, name) -> TrainRun:
        run = self.get(name)
        run.result.check()
        return run
