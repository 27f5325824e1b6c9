"""Sampling with fairseq-generate and fairseq-interactive. Trainings and command lines: lm_runs.py."""

import math
import re
from typing import Dict

import pytest

from tests.cli.lm_runs import Hypothesis, INTERACTIVE_PROMPTS, TPS, USER_DIR, parse_hypotheses


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
