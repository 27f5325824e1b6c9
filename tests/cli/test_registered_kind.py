"""A position kind that exists only in tests/cli/sqrt_kind.py (a module and its declaration, nothing else) trains,
evaluates and decodes through fairseq's real command-line tools: the registry is the one place a kind
is added. The tools load it through a ``--user-dir`` written into the test's temporary folder that
imports ``fairseq_urpe`` and registers the kind; no file of the repository is touched."""

import math

import pytest

from fairseq_urpe.fairseq_runs import eval_lm_result, fairseq_command, fairseq_env, run
from tests.checkpoints import load_checkpoint
from tests.cli.lm_runs import REPO, parse_hypotheses
from tests.cli.sqrt_kind import HEADS, KIND

TPS, UPDATES = 64, 12


@pytest.fixture(scope="module")
def kind_runs(brown_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("registered_kind")
    user_dir = root / "sqrt_test_kind"
    user_dir.mkdir()
    (user_dir / "__init__.py").write_text(
        "import fairseq_urpe  # noqa: F401\nfrom tests.cli.sqrt_kind import register\n\nregister()\n"
    )
    env = fairseq_env(threads=1, PYTHONPATH=str(REPO))
    common = [brown_data.bin, "--task", "language_modeling", "--user-dir", user_dir, "--cpu", "--num-workers", "0"]
    save = root / "checkpoints"
    runs = {"train": run(fairseq_command("train") + common + [
        "--arch", "transformer_lm_urpe_tiny", "--rpe-kind", KIND, "--seed", "1", "--optimizer", "adam",
        "--lr", "0.002", "--dropout", "0", "--tokens-per-sample", TPS, "--sample-break-mode", "none",
        "--max-tokens", "2048", "--required-batch-size-multiple", "1", "--max-update", UPDATES,
        "--log-format", "simple", "--log-interval", "4", "--save-dir", save, "--no-epoch-checkpoints",
        "--validate-interval-updates", UPDATES], env=env, cwd=root)}
    checkpoint = save / "checkpoint_last.pt"
    runs["eval_lm"] = run(fairseq_command("eval-lm") + common + [
        "--path", checkpoint, "--gen-subset", "valid", "--sample-break-mode", "none", "--tokens-per-sample", TPS,
        "--max-tokens", "4096"], env=env, cwd=root)
    runs["generate"] = run(fairseq_command("generate") + common + [
        "--path", checkpoint, "--gen-subset", "test", "--seed", "1", "--sampling", "--beam", "1", "--nbest", "1",
        "--max-len-a", "0", "--max-len-b", "8", "--sample-break-mode", "eos", "--tokens-per-sample", TPS,
        "--skip-invalid-size-inputs-valid-test", "--prefix-size", "2", "--batch-size", "64"],
        env=env, cwd=root)
    runs["checkpoint"] = checkpoint
    return runs


@pytest.mark.e2e
def test_a_kind_defined_in_a_test_trains_evaluates_and_decodes_through_the_clis(kind_runs, brown_data):
    kind_runs["train"].check()
    state = load_checkpoint(kind_runs["checkpoint"])
    assert str(state["cfg"]["model"]["rpe_kind"]) == KIND
    weight = state["model"]["decoder.position_bias.weight"]  # the kind's module, shared by the layers
    assert weight.shape == (HEADS,) and (weight - 0.5).abs().max() > 1e-4, weight
    assert "decoder.toeplitz.weight" in state["model"]  # the URPE arch's c, beside the new b

    result = eval_lm_result(kind_runs["eval_lm"].check().output)
    assert result.tokens == brown_data.tokens["valid"]
    assert math.isfinite(result.ppl) and result.ppl < brown_data.uniform_ppl / 4, result

    hyps = parse_hypotheses(kind_runs["generate"].check().output)
    assert len(hyps) >= 190, len(hyps)  # 200 test sentences, few skipped
    for hyp in hyps.values():
        assert 1 <= len(hyp.tokens) <= 8 and math.isfinite(hyp.score) and hyp.score < 0, hyp
