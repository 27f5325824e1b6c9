"""fairseq-eval-lm on the trained models: at the training length, 4x longer, with a sliding window. Trainings and command lines: lm_runs.py."""

import math

import pytest

from fairseq_urpe.fairseq_runs import EvalLm, valid_losses
from tests.cli.lm_runs import TPS, eval_lm_args, parse_eval_lm


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
