"""End-to-end tests: the plugin driven through fairseq's real command-line tools, plus its hub interface.

Every model is trained once, in the background, by the module-scoped ``trainings`` fixture (two
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

import math
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import torch

from fairseq_urpe.fairseq_runs import EvalLm, Run, model_params, train_inner_losses, valid_losses
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


def load_checkpoint(path) -> dict:
    # fairseq checkpoints hold an omegaconf config and numpy scalars, so weights_only must be off.
    return torch.load(path, map_location="cpu", weights_only=False)


def num_updates(checkpoint: dict) -> int:
    return checkpoint["optimizer_history"][-1]["num_updates"]


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
# trainings: every fairseq-train run of the module, started once, two at a time


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


@pytest.fixture(scope="module")
def trainings(cli, brown_data, tmp_path_factory):
    runs = Trainings(cli, brown_data, tmp_path_factory.mktemp("train"))
    yield runs
    runs.close()


# ----------------------------------------------------------------------------------------------------
# 1. training side by side


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["urpe", "rpe", "stock"])
def test_train_writes_checkpoint_and_validation_loss_decreases(trainings, brown_data, name):
    run = trainings.model(name)
    assert f"model: {MODEL_CLASS[name]}" in run.log
    assert f"Stopping training due to num_updates: {TRAIN_UPDATES} >= max_update: {TRAIN_UPDATES}" in run.log

    assert run.checkpoint.is_file()
    checkpoint = load_checkpoint(run.checkpoint)
    assert num_updates(checkpoint) == TRAIN_UPDATES
    assert checkpoint["cfg"]["model"]["_name"] == ARCH_NAME[name]

    losses = valid_losses(run.log)
    assert len(losses) == 4, run.result.tail()  # see VALIDATE_EVERY
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0] - 0.1, f"validation loss did not go down: {losses}"
    assert 2 ** losses[-1] < brown_data.uniform_ppl, (losses, brown_data.uniform_ppl)


@pytest.mark.e2e
def test_train_relative_and_stock_models_side_by_side(trainings, brown_data):
    runs = {name: trainings.model(name) for name in ("urpe", "rpe", "stock")}
    # Same sizes: the plugin adds exactly the T5 bias b (heads x buckets) for RPE, plus URPE's
    # Toeplitz table c of the same shape; both are one set shared by the 2 layers. Stock uses
    # parameter-free sinusoidal positions.
    params = {name: model_params(run.log) for name, run in runs.items()}
    assert params["rpe"] - params["stock"] == HEADS * BUCKETS, params
    assert params["urpe"] - params["rpe"] == HEADS * BUCKETS, params

    final_ppl = {name: 2 ** valid_losses(run.log)[-1] for name, run in runs.items()}
    assert all(ppl < brown_data.uniform_ppl / 10 for ppl in final_ppl.values()), final_ppl
    assert max(final_ppl.values()) < 2 * min(final_ppl.values()), final_ppl


# ----------------------------------------------------------------------------------------------------
# 2. interrupt and resume


@pytest.mark.e2e
def test_resume_continues_from_checkpoint_last(trainings):
    runs = trainings.get("resume")
    runs.first.check()
    runs.second.check()
    assert "No existing checkpoint found" in runs.first.output
    assert num_updates(load_checkpoint(runs.at_n)) == RESUME_N

    last = re.escape(str(runs.save_dir / "checkpoint_last.pt"))
    assert re.search(rf"Loaded checkpoint {last} \(epoch \d+ @ {RESUME_N} updates\)", runs.second.output), (
        runs.second.tail()
    )
    assert "No existing checkpoint found" not in runs.second.output
    resumed_updates = sorted(train_inner_losses(runs.second.output))
    assert resumed_updates == list(range(RESUME_N + 1, 2 * RESUME_N + 1)), resumed_updates
    target = 2 * RESUME_N
    assert f"Stopping training due to num_updates: {target} >= max_update: {target}" in runs.second.output
    assert num_updates(load_checkpoint(runs.save_dir / "checkpoint_last.pt")) == target


@pytest.mark.e2e
def test_resume_matches_uninterrupted_training(trainings, brown_data):
    """2N updates in one go == N updates, stop, resume to 2N (same seed, no dropout, one thread).

    Not bit-for-bit, for a precise reason in fairseq (not the plugin): fairseq_task.get_batch_iterator
    draws the partition of blocks into batches once per *process*, under ``numpy_seed(seed + epoch)``
    with the epoch the process starts in, and reuses it for later epochs (can_reuse_epoch_itr;
    ``rebuild_batches`` is not an option of the language_modeling task). A resumed process starts in a
    later epoch, so with several batches per epoch it trains on differently composed batches from its
    first update on (tried: with 16 batches/epoch the first resumed update's loss already differs, and
    the final weights differ by ~1e-2). The test therefore trains on the small split "resume" as a
    single batch per update (and --required-batch-size-multiple 1 so no block is dropped): every
    update sees the same blocks in both runs. Only the order of the blocks inside the batch still
    comes from that seed, which changes the float32 summation order of the weight gradients: the
    runs agree to a few 1e-6 (observed <= 3e-6), not exactly. The test asserts agreement to 2e-5, while
    the N resumed updates themselves moved the weights by ~8e-3.
    """
    runs, oneshot = trainings.get("resume"), trainings.get("oneshot")
    for result in (runs.first, runs.second, oneshot):
        result.check()
    # One batch per update holding the whole split.
    batch_tokens = {float(x) for x in re.findall(r"wpb=([\d.]+)", oneshot.output)}
    assert batch_tokens == {float(brown_data.tokens["resume"])}, batch_tokens

    # Same training curve: identical up to the interruption, equal to the logged precision after it.
    one = train_inner_losses(oneshot.output)
    interrupted = {**train_inner_losses(runs.first.output), **train_inner_losses(runs.second.output)}
    assert sorted(one) == sorted(interrupted) == list(range(1, 2 * RESUME_N + 1))
    for update in one:
        if update <= RESUME_N:
            assert one[update] == interrupted[update], (update, one, interrupted)
        else:
            assert abs(float(one[update]) - float(interrupted[update])) <= 0.002, (update, one, interrupted)

    final_one = load_checkpoint(trainings.root / "oneshot" / "checkpoint_last.pt")
    final_resumed = load_checkpoint(runs.save_dir / "checkpoint_last.pt")
    at_n = load_checkpoint(runs.at_n)
    assert num_updates(final_one) == num_updates(final_resumed) == 2 * RESUME_N
    assert final_one["model"].keys() == final_resumed["model"].keys()
    moved = 0.0
    for key, expected in final_one["model"].items():
        actual = final_resumed["model"][key]
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=2e-5, msg=lambda m: f"{key}: {m}")
        moved = max(moved, (expected.float() - at_n["model"][key].float()).abs().max().item())
    # The tolerance is tight relative to what the N resumed updates changed.
    assert moved > 50 * 2e-5, moved

    # Adam's state was restored too: same step counts and moments.
    state_one = final_one["last_optimizer_state"]["state"]
    state_resumed = final_resumed["last_optimizer_state"]["state"]
    assert state_one.keys() == state_resumed.keys()
    for index in state_one:
        assert int(state_one[index]["step"]) == int(state_resumed[index]["step"]) == 2 * RESUME_N
        torch.testing.assert_close(state_resumed[index]["exp_avg"], state_one[index]["exp_avg"], rtol=1e-3, atol=1e-6)


# ----------------------------------------------------------------------------------------------------
# 3. fairseq-eval-lm


# (model, case) -> (--tokens-per-sample, --context-window). eval-lm subtracts the context window from
# --tokens-per-sample: every block of scored tokens follows up to context-window tokens of context.
EVAL_CASES = {
    ("urpe", "train_length"): (TPS, 0),
    ("urpe", "sliding_4x"): (4 * TPS, 3 * TPS),  # 128 scored after 384 of context: 512-token inputs
    ("rpe", "4x"): (4 * TPS, 0),  # 512-token blocks, the first tokens of each without context
}


@pytest.fixture(scope="module")
def eval_lm_runs(cli, brown_data, trainings):
    jobs = {}
    for (name, case), (tps, context) in EVAL_CASES.items():
        extra = ["--context-window", context] if context else []
        jobs[name, case] = ("eval-lm", eval_lm_args(brown_data, trainings.model(name).checkpoint, *extra, tps=tps))
    return cli.run_many(jobs)


def checked_eval(eval_lm_runs, brown_data, name, mode) -> EvalLm:
    result = eval_lm_runs[name, mode].check()
    ev = parse_eval_lm(result.output)
    # Every token of the split was scored: eval-lm skips (with a warning only) inputs that are too long.
    assert ev.tokens == brown_data.tokens["valid"], (ev, result.tail())
    assert math.isfinite(ev.loss) and math.isfinite(ev.ppl), ev
    assert 1.0 < ev.ppl < brown_data.uniform_ppl, ev
    assert ev.ppl == pytest.approx(2 ** ev.loss, rel=1e-3)
    return ev


def training_ppl(trainings, name) -> float:
    """Perplexity of the last validation fairseq-train logged (valid split, training length)."""
    return 2 ** valid_losses(trainings.model(name).log)[-1]


@pytest.mark.e2e
def test_eval_lm_reproduces_last_validation_of_training(eval_lm_runs, brown_data, trainings):
    ev = checked_eval(eval_lm_runs, brown_data, "urpe", "train_length")
    # Same split, same blocks, same final weights: fairseq-train logs 3 decimals, eval-lm 4.
    assert ev.loss == pytest.approx(valid_losses(trainings.model("urpe").log)[-1], abs=2e-3)


@pytest.mark.e2e
@pytest.mark.parametrize("name, case", [("urpe", "sliding_4x"), ("rpe", "4x")])
def test_eval_lm_at_4x_training_length(eval_lm_runs, brown_data, trainings, name, case):
    # No absolute positions: inputs of 512 tokens (distances up to 511) after training on 128, and the
    # perplexity stays where it was at the training length.
    long = checked_eval(eval_lm_runs, brown_data, name, case)
    assert 0.9 < long.ppl / training_ppl(trainings, name) < 1.1, (long, training_ppl(trainings, name))


@pytest.mark.e2e
def test_eval_lm_sliding_context_window(eval_lm_runs, brown_data, trainings):
    sliding = checked_eval(eval_lm_runs, brown_data, "urpe", "sliding_4x")
    plain = checked_eval(eval_lm_runs, brown_data, "urpe", "train_length")
    assert f"'context_window': {EVAL_CASES['urpe', 'sliding_4x'][1]}" in eval_lm_runs["urpe", "sliding_4x"].output
    # Every scored token now has >= 384 tokens of context (or all there is), against 0-127 in plain
    # 128-token blocks: not worse than that, and (a tiny model uses little context) not far better.
    assert 0.9 < sliding.ppl / plain.ppl < 1.05, (plain, sliding)


# ----------------------------------------------------------------------------------------------------
# 4. sampling with fairseq-generate and fairseq-interactive


@pytest.fixture(scope="module")
def sampling_runs(cli, brown_data, trainings):
    sampling = ["--task", "language_modeling", "--user-dir", USER_DIR, "--cpu", "--seed", "1",
                "--sampling", "--beam", "1", "--nbest", "1", "--max-len-a", "0", "--max-len-b", "12"]
    jobs = {
        # generate: one test sentence per sample (--sample-break-mode eos), its first 2 words forced as
        # the prompt (--prefix-size reads them from the target), up to 12 tokens in all.
        "generate": ("generate", [
            brown_data.bin, "--path", trainings.model("urpe").checkpoint, *sampling, "--gen-subset", "test",
            "--num-workers", "0", "--sample-break-mode", "eos", "--tokens-per-sample", TPS,
            "--skip-invalid-size-inputs-valid-test", "--prefix-size", "2", "--batch-size", "64",
        ]),
        # interactive: every stdin line is a prompt (the language_modeling task makes it prefix tokens).
        "interactive": (
            "interactive", [brown_data.bin, "--path", trainings.model("rpe").checkpoint, *sampling],
            {"input": "\n".join(INTERACTIVE_PROMPTS) + "\n"},
        ),
    }
    return cli.run_many(jobs)


def check_hypotheses(hyps: Dict[int, Hypothesis], data, max_len=12):
    for hyp in hyps.values():
        assert 1 <= len(hyp.tokens) <= max_len, hyp
        assert all(t in data.words or t == "<unk>" for t in hyp.tokens), hyp
        assert len(hyp.positional) == len(hyp.tokens) + 1, hyp  # + </s>
        assert all(math.isfinite(p) and p <= 1e-6 for p in hyp.positional), hyp
        assert math.isfinite(hyp.score) and hyp.score < 0, hyp


@pytest.mark.e2e
def test_generate_samples_continuations_of_test_sentences_urpe(sampling_runs, brown_data):
    result = sampling_runs["generate"].check()
    hyps = parse_hypotheses(result.stdout)
    translated = int(re.search(r"Translated ([\d,]+) sentences", result.output).group(1).replace(",", ""))
    assert len(hyps) == translated >= 190, (len(hyps), translated)  # 200 test sentences, few skipped
    check_hypotheses(hyps, brown_data)

    continuations = []
    for hyp in hyps.values():
        prefix = hyp.source.split()[:2]
        assert hyp.tokens[: len(prefix)] == prefix, hyp
        continuations.append(hyp.tokens[len(prefix):])
    generated = [t for c in continuations for t in c]
    assert len(generated) > 5 * len(hyps), "the model hardly generated anything"
    assert sum(t in brown_data.words for t in generated) > 0.5 * len(generated), "mostly <unk>"
    # Sampling, not greedy search: identical prompts ("to the", ...) get different continuations.
    assert len({tuple(c) for c in continuations if c}) > 0.9 * sum(1 for c in continuations if c)


@pytest.mark.e2e
def test_interactive_continues_stdin_prompts_rpe(sampling_runs, brown_data):
    for prompt in INTERACTIVE_PROMPTS:
        assert all(word in brown_data.words for word in prompt.split()), prompt
    result = sampling_runs["interactive"].check()
    hyps = parse_hypotheses(result.stdout)
    assert sorted(hyps) == list(range(len(INTERACTIVE_PROMPTS))), result.stdout
    check_hypotheses(hyps, brown_data)
    added = 0
    for index, prompt in enumerate(INTERACTIVE_PROMPTS):
        assert hyps[index].source == prompt
        assert hyps[index].tokens[: len(prompt.split())] == prompt.split(), hyps[index]
        added += len(hyps[index].tokens) - len(prompt.split())
        assert re.search(rf"^D-{index}\t", result.stdout, re.M)
    assert added >= 3, hyps


# ----------------------------------------------------------------------------------------------------
# 5. hub interface, in-process


@pytest.fixture
def one_torch_thread():
    """In-process model runs with one thread, like the subprocesses (two threads on two busy cores
    can make torch many times slower)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["urpe", "rpe"])
def test_hub_from_pretrained_scores_and_samples(trainings, brown_data, one_torch_thread, name):
    from fairseq.models.transformer_lm import TransformerLanguageModel

    run = trainings.model(name)
    lm = TransformerLanguageModel.from_pretrained(
        str(run.save_dir), "checkpoint_last.pt", str(brown_data.bin), user_dir=USER_DIR, tokenizer="moses"
    )
    lm.eval()

    from fairseq_urpe.models.relative_transformer_lm import RelativeTransformerLanguageModel
    from fairseq_urpe.modules import RelativeMultiheadAttention, ToeplitzReweighting

    model = lm.models[0]
    assert type(model) is RelativeTransformerLanguageModel
    attention = model.decoder.layers[0].self_attn
    assert isinstance(attention, RelativeMultiheadAttention)
    assert isinstance(attention.toeplitz, ToeplitzReweighting) if name == "urpe" else attention.toeplitz is None
    assert model.decoder.embed_positions is None

    assert all(word in brown_data.words for word in SCORE_SENTENCE.split())
    # score: one log-probability per token of the sentence (the final </s> is not scored).
    encoded = lm.encode(SCORE_SENTENCE)
    scored = lm.score(SCORE_SENTENCE)
    assert torch.equal(scored["tokens"], encoded[:-1])
    positional = scored["positional_scores"]
    assert positional.shape == (len(SCORE_SENTENCE.split()),)
    assert torch.isfinite(positional).all() and (positional < 0).all(), positional
    assert lm.decode(encoded) == "The committee said."  # the moses detokenizer is in use

    torch.manual_seed(0)
    sample = lm.sample(PROMPT, sampling=True, sampling_topk=10, max_len_b=10)
    assert isinstance(sample, str) and sample.startswith(PROMPT), sample
    assert len(lm.encode(sample)) > len(lm.encode(PROMPT)), f"nothing sampled: {sample!r}"
    assert not re.search(r" [.,;:!?]( |$)", sample), f"not detokenized: {sample!r}"

    # Incremental decoding (cached keys, positions from the cache) agrees with a full forward pass:
    # the scores recorded while sampling equal the scores of re-scoring the sampled tokens. Once up to
    # the first </s>, once forced to 2x the training length (distances past --rpe-max-distance 128).
    for seed, lengths in ((0, {"max_len_b": 40}), (1, {"min_len": 2 * TPS, "max_len_b": 2 * TPS})):
        torch.manual_seed(seed)
        hypo = lm.generate([lm.encode(PROMPT)], beam=1, sampling=True, sampling_topk=10, **lengths)[0][0]
        rescored = lm.generate([hypo["tokens"]], score_reference=True)[0][0]
        length = len(rescored["tokens"])
        assert length == len(hypo["tokens"]) - 1  # all but the final </s>
        if "min_len" in lengths:
            assert length == 2 * TPS, length
        # float32 sums over up to 256 keys in two different orders: observed differences <= ~3e-5.
        torch.testing.assert_close(
            hypo["positional_scores"][:length], rescored["positional_scores"], rtol=1e-5, atol=1e-4
        )


@pytest.mark.e2e
def test_checkpoints_hold_relative_position_weights(trainings):
    state = {name: load_checkpoint(trainings.model(name).checkpoint) for name in ("urpe", "rpe", "stock")}
    urpe, rpe, stock = (state[n]["model"] for n in ("urpe", "rpe", "stock"))
    assert state["urpe"]["cfg"]["model"]["urpe_toeplitz"] == "bucketed"
    assert state["rpe"]["cfg"]["model"]["urpe_toeplitz"] == "none"

    prefix = "decoder."  # one set shared by both layers (no --rpe-per-layer), stored once under the decoder
    assert urpe[prefix + "toeplitz.weight"].shape == (HEADS, BUCKETS)
    assert urpe[prefix + "position_bias.weight"].shape == (HEADS, BUCKETS)
    assert rpe[prefix + "position_bias.weight"].shape == (HEADS, BUCKETS)
    assert prefix + "toeplitz.weight" not in rpe
    for weights in (urpe, rpe):
        assert not any(k.startswith("decoder.layers.") and (".toeplitz." in k or ".position_bias." in k) for k in weights)
    # Trained away from its init (c = 1, b = 0).
    for weights, key, init in ((urpe, "toeplitz", 1.0), (urpe, "position_bias", 0.0), (rpe, "position_bias", 0.0)):
        first = weights[f"decoder.{key}.weight"]
        assert (first - init).abs().max() > 1e-3, (key, first)
    assert not any(".toeplitz." in k or ".position_bias." in k for k in stock)
    for weights in (urpe, rpe):
        assert not any("embed_positions" in k for k in weights)


# ----------------------------------------------------------------------------------------------------
# 6. bad input through the command line


@pytest.fixture(scope="module")
def bad_option_runs(cli, brown_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_options")
    jobs = {
        "toeplitz_foo": ("train", train_args(
            brown_data, root / "toeplitz_foo", *ARCHS["urpe"], "--urpe-toeplitz", "foo", "--max-update", "1")),
        "zero_buckets": ("train", train_args(
            brown_data, root / "zero_buckets", *ARCHS["rpe"], "--rpe-num-buckets", "0", "--max-update", "1")),
    }
    return root, cli.run_many(jobs)


@pytest.fixture(scope="module")
def unique_eval_lm_beyond_max(cli, brown_data, trainings):
    unique = trainings.model("unique").checkpoint
    return cli.run("eval-lm", *eval_lm_args(brown_data, unique, tps=4 * UNIQUE_MAX_DISTANCE))


@pytest.mark.e2e
def test_invalid_urpe_toeplitz_choice_is_rejected(bad_option_runs):
    root, results = bad_option_runs
    result = results["toeplitz_foo"]
    assert result.returncode == 2, result.tail()  # argparse's usage error
    assert "argument --urpe-toeplitz: invalid choice: 'foo'" in result.stderr, result.stderr[-2000:]
    assert not (root / "toeplitz_foo" / "checkpoint_last.pt").exists()


@pytest.mark.e2e
def test_zero_rpe_num_buckets_fails_naming_the_option(bad_option_runs):
    root, results = bad_option_runs
    result = results["zero_buckets"]
    assert result.returncode != 0, result.tail()
    # Raised by the plugin while fairseq-train builds the model.
    assert "--rpe-num-buckets must be an integer >= 2, got 0" in result.stderr, result.stderr[-2000:]
    assert not (root / "zero_buckets" / "checkpoint_last.pt").exists()


@pytest.mark.e2e
def test_unique_toeplitz_trains_within_its_max_distance(trainings):
    run = trainings.model("unique")
    checkpoint = load_checkpoint(run.checkpoint)
    model_cfg = checkpoint["cfg"]["model"]
    assert (model_cfg["urpe_toeplitz"], model_cfg["urpe_beyond_max"]) == ("unique", "error")
    assert model_cfg["urpe_max_distance"] == UNIQUE_MAX_DISTANCE
    # One entry per distance 0..max_distance, per head.
    assert checkpoint["model"]["decoder.layers.0.self_attn.toeplitz.weight"].shape == (HEADS, UNIQUE_MAX_DISTANCE + 1)
    # Inputs of --tokens-per-sample 16 (distances <= 15) train and validate fine.
    losses = valid_losses(run.log)
    assert losses and all(math.isfinite(x) for x in losses), run.result.tail()


@pytest.mark.e2e
def test_unique_toeplitz_error_mode_eval_lm_beyond_max_distance(unique_eval_lm_beyond_max):
    """fairseq-eval-lm at 64 tokens on a model whose table ends at distance 16 (--urpe-beyond-max error).

    The model reports no maximum length (had it reported 17, fairseq-eval-lm would silently skip every
    longer block and exit 0 with the perplexity of what is left: eval_lm_dataloader always passes
    ignore_invalid_inputs=True). So the first long block reaches the table, which refuses it with an
    error naming the option, and fairseq-eval-lm fails.
    """
    result = unique_eval_lm_beyond_max
    assert result.returncode != 0, result.tail()
    assert f"--urpe-max-distance={UNIQUE_MAX_DISTANCE} but the input needs" in result.stderr, result.tail()
    assert "Perplexity" not in result.output


@pytest.mark.e2e
def test_unique_toeplitz_error_mode_refuses_longer_inputs(trainings, brown_data, one_torch_thread):
    """The hub interface (score) on an input past the table fails with the plugin's error; within the
    table the model runs. (In-process, to spare another ~7 s process start.)"""
    from fairseq.models.transformer_lm import TransformerLanguageModel

    run = trainings.model("unique")
    lm = TransformerLanguageModel.from_pretrained(
        str(run.save_dir), "checkpoint_last.pt", str(brown_data.bin), user_dir=USER_DIR,
        tokens_per_sample=4 * UNIQUE_MAX_DISTANCE,  # the task's own limit, above the table
    )
    lm.eval()
    sentence = " ".join(["the committee said that the city"] * 5)  # 30 words
    tokens = lm.encode(sentence)[None, :]  # (1, 31) with </s>: distances up to 30
    with pytest.raises(ValueError, match=rf"--urpe-max-distance={UNIQUE_MAX_DISTANCE} but the input needs \d+"):
        lm.score(sentence)
    with torch.no_grad():  # within the table it runs
        assert torch.isfinite(lm.models[0](tokens[:, : UNIQUE_MAX_DISTANCE + 1])[0]).all()
