"""A checkpoint is data: one carrying a pickled payload (a call of ``exec`` that writes a marker file) is
read through every documented command, and the payload never runs without the opt-in; our commands'
refusals name it (``TRUST_CHECKPOINT_CODE`` / ``--trust-checkpoint-code``), fairseq's own (fairseq-eval-lm,
the hub) refuse through torch's weights-only load. With the opt-in the marker is written: the test can fail."""

import os
import shutil
import sys

import pytest
import torch

from fairseq_urpe.checkpoint_file import TRUST_VARIABLE, UntrustedCheckpoint, read_checkpoint
from fairseq_urpe.fairseq_runs import fairseq_env, run
from tests.checkpoints import load_checkpoint
from tests.cli.lm_runs import REPO, USER_DIR, eval_lm_args

OPT_IN = [TRUST_VARIABLE, "--trust-checkpoint-code"]


class Payload:
    """Unpickles as ``exec(code)``."""

    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return exec, (self.code,)


@pytest.fixture(scope="module")
def payload(trainings, tmp_path_factory):
    """(checkpoint path, marker path): the URPE training's checkpoint with a payload in its extra state."""
    root = tmp_path_factory.mktemp("payload")
    marker = root / "marker"
    state = load_checkpoint(trainings.model("urpe").checkpoint)
    state["extra_state"]["payload"] = Payload(f"open({str(marker)!r}, 'a').write('ran\\n')")
    path = root / "checkpoint_payload.pt"
    torch.save(state, path)
    assert not marker.exists()
    return path, marker


def python(*args, env=None):
    environment = fairseq_env(threads=1, **(env or {}))
    environment.pop(TRUST_VARIABLE, None)
    environment.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    environment.update(env or {})
    return run([sys.executable, *map(str, args)], env=environment, cwd=REPO)


@pytest.mark.e2e
def test_read_checkpoint_refuses_the_payload_naming_the_opt_in_and_runs_it_only_when_trusted(payload, monkeypatch):
    path, marker = payload
    monkeypatch.delenv(TRUST_VARIABLE, raising=False)
    with pytest.raises(UntrustedCheckpoint, match=f"it asks for exec.*set {TRUST_VARIABLE}=1"):
        read_checkpoint(path)
    assert not marker.exists()
    read_checkpoint(path, trust_code=True)
    assert marker.read_text() == "ran\n"
    marker.unlink()


@pytest.mark.e2e
def test_fairseq_eval_lm_refuses_the_payload(cli, brown_data, payload):
    path, marker = payload
    result = cli.run("eval-lm", *eval_lm_args(brown_data, path))
    assert result.returncode != 0 and "Weights only load failed" in result.output, result.tail()
    assert not marker.exists()


@pytest.mark.e2e
def test_the_hub_refuses_the_payload(brown_data, payload):
    from fairseq.models.transformer_lm import TransformerLanguageModel

    path, marker = payload
    with pytest.raises(Exception, match="Weights only load failed"):
        TransformerLanguageModel.from_pretrained(str(path.parent), path.name, str(brown_data.bin), user_dir=USER_DIR)
    assert not marker.exists()


@pytest.mark.e2e
def test_position_plots_refuse_the_payload_naming_the_opt_in(brown_data, payload, tmp_path):
    path, marker = payload
    refused = python("-m", "fairseq_urpe.position_plots", path, "--out", tmp_path, "--data", brown_data.bin)
    assert refused.returncode != 0 and all(o in refused.output for o in OPT_IN), refused.tail()
    assert not marker.exists()


@pytest.mark.e2e
@pytest.mark.parametrize("dry_run", ["1", "0"])
def test_eval_sh_refuses_the_payload_naming_the_opt_in_with_and_without_dry_run(brown_data, payload, tmp_path, dry_run):
    path, marker = payload
    data = tmp_path / "bin"
    shutil.copytree(brown_data.bin, data)
    (data / ".done").write_text("")
    refused = run(["bash", str(REPO / "examples/wikitext103/eval.sh")], cwd=tmp_path, env={
        **fairseq_env(threads=1), "CHECKPOINT": str(path), "DATA_BIN": str(data), "SPLITS": "test", "CPU": "1",
        "DRY_RUN": dry_run, "WT103_DIR": str(tmp_path / "wt103"), "URPE_VENV": str(REPO / ".venv"),
        "RUN_NAME": "payload", TRUST_VARIABLE: "0"})
    assert refused.returncode != 0 and TRUST_VARIABLE in refused.output, refused.tail()
    assert not marker.exists()


@pytest.mark.e2e
@pytest.mark.parametrize("study", ["evaluate_lengths", "c_ablation"])
def test_the_language_model_studies_refuse_the_payload_naming_the_opt_in(brown_data, payload, tmp_path, study):
    path, marker = payload
    args = ["--checkpoint", path, "--out", tmp_path / "out.json"] if study == "evaluate_lengths" else [path]
    refused = python("-m", f"experiments.language_modeling.{study}", "--data", brown_data.bin, *args)
    assert refused.returncode != 0 and all(o in refused.output for o in OPT_IN), refused.tail()
    assert not marker.exists()


@pytest.mark.e2e
def test_an_empty_checkpoint_is_named(tmp_path):
    empty = tmp_path / "checkpoint_last.pt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=f"checkpoint {empty} is empty"):
        read_checkpoint(empty)
    refused = python("-m", "fairseq_urpe.position_plots", empty, "--out", tmp_path)
    assert refused.returncode != 0 and f"checkpoint {empty} is empty" in refused.output, refused.tail()
