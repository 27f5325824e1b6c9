"""Bad input through the command line: refused, naming the option. Trainings and command lines: lm_runs.py."""

import math

import pytest
import torch

from fairseq_urpe.fairseq_runs import valid_losses
from tests.checkpoints import load_checkpoint
from tests.cli.lm_runs import ARCHS, HEADS, UNIQUE_MAX_DISTANCE, USER_DIR, eval_lm_args, train_args


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
    assert checkpoint["model"]["decoder.toeplitz.weight"].shape == (HEADS, UNIQUE_MAX_DISTANCE + 1)
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
