"""Checkpoints of the per-layer layout (shared b and c copied under every layer) upgrade on load, one way,
and resuming one with its optimizer state asks for ``--reset-optimizer`` (its moments are in the old
parameter order); with it, training goes on. The outputs of the upgraded models are checked against
those the old code computed in test_position_family.py."""

import re
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils

import fairseq_urpe  # noqa: F401  (registers the archs the legacy checkpoints name)
from fairseq_urpe.fairseq_runs import fairseq_command, fairseq_env, run, train_inner_losses
from fairseq_urpe.models.checkpoint_upgrade import OLD_LAYOUT_OPTIMIZER

LEGACY = Path(__file__).parent / "legacy"
REPO = Path(__file__).resolve().parents[2]
SHARED_KEY = re.compile(r"decoder\.layers\.\d+\.self_attn\.(position_bias|toeplitz)\..+")


def load(path):
    models, _ = checkpoint_utils.load_model_ensemble([str(path)], arg_overrides={"data": str(LEGACY)})
    return models[0]


@pytest.mark.parametrize("name,shared", [("rpe", True), ("urpe_bucketed", True), ("urpe_unique", False)])
def test_an_upgraded_checkpoint_is_saved_in_the_new_layout_and_loads_back(name, shared, tmp_path):
    stored = torch.load(LEGACY / f"{name}.pt", weights_only=False)
    assert any(SHARED_KEY.fullmatch(k) for k in stored["model"])  # every layout so far lists them per layer
    model = load(LEGACY / f"{name}.pt")
    state = model.state_dict()
    assert any(SHARED_KEY.fullmatch(k) for k in state) == (not shared)  # --rpe-per-layer: each layer its own
    assert ("decoder.position_bias.weight" in state) == shared
    stored["model"] = state
    torch.save(stored, tmp_path / "upgraded.pt")
    again = load(tmp_path / "upgraded.pt").state_dict()
    assert again.keys() == state.keys() and all(torch.equal(again[k], state[k]) for k in state)


@pytest.fixture(scope="module")
def resume_runs(tmp_path_factory):
    """fairseq-train resumes the old-layout checkpoint with its optimizer state, without and with
    --reset-optimizer (see legacy/make_resume_checkpoint.py for how it was written)."""
    root = tmp_path_factory.mktemp("resume_old_layout")
    lines = (REPO / "data" / "brown" / "train.txt").read_text().splitlines()[:40]
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    env = fairseq_env(threads=1)
    run(fairseq_command("preprocess") + ["--only-source", "--trainpref", root / "train.txt", "--validpref",
                                         root / "train.txt", "--destdir", root / "bin", "--srcdict",
                                         LEGACY / "dict.txt", "--workers", "1"], env=env).check()
    runs = {}
    for name, extra in (("restored", []), ("reset", ["--reset-optimizer"])):
        save = root / name
        save.mkdir()
        (save / "checkpoint_last.pt").write_bytes((LEGACY / "urpe_with_optimizer.pt").read_bytes())
        runs[name] = run(fairseq_command("train") + [
            root / "bin", "--user-dir", REPO / "fairseq_urpe", "--task", "language_modeling",
            "--arch", "transformer_lm_urpe", "--decoder-layers", "2", "--decoder-embed-dim", "16",
            "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "2", "--tokens-per-sample", "8",
            "--batch-size", "4", "--max-update", "4", "--optimizer", "adam", "--lr", "0.01", "--cpu", "--seed", "3",
            "--save-dir", save, "--no-epoch-checkpoints", "--disable-validation", "--log-format", "simple",
            "--log-interval", "1", *extra], env=env)
        runs[name].save = save
    return runs


@pytest.mark.e2e
def test_resuming_an_old_layout_checkpoint_with_its_optimizer_state_asks_for_reset_optimizer(resume_runs):
    restored = resume_runs["restored"]
    assert restored.returncode != 0, restored.tail()
    assert OLD_LAYOUT_OPTIMIZER in restored.output and "--reset-optimizer" in OLD_LAYOUT_OPTIMIZER, restored.tail()
    assert not train_inner_losses(restored.output)  # stopped before its first update


@pytest.mark.e2e
def test_resuming_an_old_layout_checkpoint_with_reset_optimizer_trains_on_and_saves_the_new_layout(resume_runs):
    reset = resume_runs["reset"].check()
    assert "Loaded checkpoint" in reset.output, reset.tail()
    assert sorted(train_inner_losses(reset.output)) == [1, 2, 3, 4]  # the optimizer (and its count) restart
    state = torch.load(reset.save / "checkpoint_last.pt", weights_only=False)["model"]
    assert not any(SHARED_KEY.fullmatch(k) for k in state)
    assert {"decoder.position_bias.weight", "decoder.toeplitz.weight"} <= state.keys()


def test_an_encoder_state_dict_of_the_per_layer_layout_upgrades_too():
    from tests.models.encoder_builders import build

    model, _ = build("relative_encoder_urpe_tiny")
    with torch.no_grad():
        model.encoder.toeplitz.weight.uniform_(0.5, 1.5)
    old = {}
    for key, value in model.state_dict().items():  # the per-layer layout: a copy under every layer
        slot = re.fullmatch(r"encoder\.((position_bias|toeplitz)\..+)", key)
        for i in range(len(model.encoder.layers)) if slot else ():
            old[f"encoder.layers.{i}.self_attn.{slot.group(1)}"] = value.clone()
        if not slot:
            old[key] = value
    fresh, _ = build("relative_encoder_urpe_tiny")
    fresh.load_state_dict(old)
    assert torch.equal(fresh.encoder.toeplitz.weight, model.encoder.toeplitz.weight)
    assert fresh.state_dict().keys() == model.state_dict().keys()
