"""Checkpoints of the per-layer layout (shared b and c copied under every layer) upgrade on load, one way;
the model then keeps that layout's parameter order, so resuming one with its optimizer state puts each
Adam moment on its own parameter, and its checkpoints load back in that order. Loading one touches no
other model or optimizer in the process. The outputs of the upgraded models are checked against those
the old code computed in test_position_family.py."""

import re
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils

import fairseq_urpe  # noqa: F401  (registers the archs the legacy checkpoints name)
from fairseq_urpe.fairseq_runs import fairseq_command, fairseq_env, run, train_inner_losses
from fairseq_urpe.models.checkpoint_upgrade import ORDER_MARK
from tests.checkpoints import load_checkpoint

LEGACY = Path(__file__).parent / "legacy"
REPO = Path(__file__).resolve().parents[2]
SHARED_KEY = re.compile(r"decoder\.layers\.\d+\.self_attn\.(position_bias|toeplitz)\..+")


def load(path):
    models, _ = checkpoint_utils.load_model_ensemble([str(path)], arg_overrides={"data": str(LEGACY)})
    return models[0]


@pytest.mark.parametrize("name,shared", [("rpe", True), ("urpe_bucketed", True), ("urpe_unique", False)])
def test_an_upgraded_checkpoint_is_saved_in_the_new_layout_and_loads_back(name, shared, tmp_path):
    stored = load_checkpoint(LEGACY / f"{name}.pt")
    assert any(SHARED_KEY.fullmatch(k) for k in stored["model"])  # every layout so far lists them per layer
    model = load(LEGACY / f"{name}.pt")
    state = model.state_dict()
    assert any(SHARED_KEY.fullmatch(k) for k in state) == (not shared)  # --rpe-per-layer: each layer its own
    assert ("decoder.position_bias.weight" in state) == shared
    stored["model"] = state
    torch.save(stored, tmp_path / "upgraded.pt")
    again = load(tmp_path / "upgraded.pt").state_dict()
    assert again.keys() == state.keys() and all(torch.equal(again[k], state[k]) for k in state)


def test_a_model_loaded_from_the_per_layer_layout_lists_its_parameters_in_that_layouts_optimizer_order():
    """The checkpoint's Adam moments, by index, have the shapes of the parameters the loaded model lists at
    that index: the shared tables (2, 32) sit after layer 0's projections, as that layout listed them (in the
    current order, entry 9 would be a layer norm's (16,))."""
    stored = load_checkpoint(LEGACY / "urpe_with_optimizer.pt")
    moments = stored["last_optimizer_state"]["state"]
    model = load(LEGACY / "urpe_with_optimizer.pt")
    names, params = zip(*model.named_parameters())
    assert len(params) == len(moments) == 38
    assert [tuple(moments[i]["exp_avg"].shape) for i in range(38)] == [tuple(p.shape) for p in params]
    assert names[9:11] == ("decoder.position_bias.weight", "decoder.toeplitz.weight")
    assert f"decoder.{ORDER_MARK}" in model.state_dict()
    fresh = load(LEGACY / "urpe_bucketed.pt")  # no optimizer state, but the same layout: the same order
    assert [n for n, _ in fresh.named_parameters()][9:11] == ["decoder.position_bias.weight", "decoder.toeplitz.weight"]


def test_loading_the_per_layer_layout_leaves_other_optimizers_alone(tmp_path):
    """An unrelated model and Adam, resumed from their own saved state after a per-layer checkpoint was
    upgraded in this process, step as they would have."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 2)
    adam = torch.optim.Adam(linear.parameters(), lr=0.1)
    linear(torch.ones(1, 3)).sum().backward()
    adam.step()
    torch.save({"model": linear.state_dict(), "adam": adam.state_dict()}, tmp_path / "own.pt")
    load(LEGACY / "urpe_with_optimizer.pt")
    saved = torch.load(tmp_path / "own.pt")
    again = torch.nn.Linear(3, 2)
    again.load_state_dict(saved["model"])
    resumed = torch.optim.Adam(again.parameters(), lr=0.1)
    resumed.load_state_dict(saved["adam"])
    again(torch.ones(1, 3)).sum().backward()
    resumed.step()  # raised the plugin's error when the guard was a process-wide optimizer hook
    linear.zero_grad()
    linear(torch.ones(1, 3)).sum().backward()
    adam.step()
    assert torch.equal(again.weight, linear.weight)


@pytest.fixture(scope="module")
def resume_runs(tmp_path_factory):
    """fairseq-train resumes the old-layout checkpoint with its optimizer state, then resumes what that
    saved (see legacy/make_resume_checkpoint.py for how the checkpoint was written)."""
    root = tmp_path_factory.mktemp("resume_old_layout")
    lines = (REPO / "data" / "brown" / "train.txt").read_text().splitlines()[:40]
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    env = fairseq_env(threads=1)
    run(fairseq_command("preprocess") + ["--only-source", "--trainpref", root / "train.txt", "--validpref",
                                         root / "train.txt", "--destdir", root / "bin", "--srcdict",
                                         LEGACY / "dict.txt", "--workers", "1"], env=env).check()
    save = root / "restored"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes((LEGACY / "urpe_with_optimizer.pt").read_bytes())
    runs = {}
    for name, updates in (("restored", 4), ("again", 6)):
        runs[name] = run(fairseq_command("train") + [
            root / "bin", "--user-dir", REPO / "fairseq_urpe", "--task", "language_modeling",
            "--arch", "transformer_lm_urpe", "--decoder-layers", "2", "--decoder-embed-dim", "16",
            "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "2", "--tokens-per-sample", "8",
            "--batch-size", "4", "--max-update", str(updates), "--optimizer", "adam", "--lr", "0.01", "--cpu",
            "--seed", "3", "--save-dir", save, "--no-epoch-checkpoints", "--disable-validation", "--log-format",
            "simple", "--log-interval", "1", "--num-workers", "0"], env=env)
        runs[name].save = save
        runs[name].state = load_checkpoint(save / "checkpoint_last.pt")
    return runs


@pytest.mark.e2e
def test_resuming_an_old_layout_checkpoint_with_its_optimizer_state_trains_on_from_its_moments(resume_runs):
    restored = resume_runs["restored"].check()
    assert "Loaded checkpoint" in restored.output, restored.tail()
    assert sorted(train_inner_losses(restored.output)) == [3, 4]  # the checkpoint had taken 2 updates
    state = restored.state
    assert not any(SHARED_KEY.fullmatch(k) for k in state["model"])
    assert {"decoder.position_bias.weight", "decoder.toeplitz.weight", f"decoder.{ORDER_MARK}"} <= state["model"].keys()
    moments = state["last_optimizer_state"]["state"]
    assert tuple(moments[9]["exp_avg"].shape) == (2, 32) and moments[9]["step"] == 4


@pytest.mark.e2e
def test_a_checkpoint_saved_after_the_upgrade_resumes_in_the_same_order(resume_runs):
    again = resume_runs["again"].check()
    assert sorted(train_inner_losses(again.output)) == [5, 6], again.tail()
    moments = again.state["last_optimizer_state"]["state"]
    model = again.state["model"]
    assert tuple(moments[9]["exp_avg"].shape) == tuple(model["decoder.position_bias.weight"].shape)


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
    assert set(fresh.state_dict()) == set(model.state_dict()) | {f"encoder.{ORDER_MARK}"}  # and that layout's order
