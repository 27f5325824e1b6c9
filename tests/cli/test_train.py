"""fairseq-train: stock, RPE and URPE side by side, the checkpoints they write.
Trainings and command lines: lm_runs.py."""

import math

import pytest

from fairseq_urpe.fairseq_runs import model_params, valid_losses
from tests.checkpoints import load_checkpoint, num_updates
from tests.cli.lm_runs import ARCH_NAME, BUCKETS, HEADS, MODEL_CLASS, TRAIN_UPDATES, VALIDATE_EVERY


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
