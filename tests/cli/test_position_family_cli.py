"""Through the real ``fairseq-train`` and ``fairseq-eval-lm``, one variant per position kind (alibi, log,
learned, none, RoPE; t5's RPE and URPE archs are trained by lm_runs.Trainings and scored at 4x in
test_eval_lm.py), with and without URPE's ``C``, and dot-product-free for two kinds: each trains a few
updates and is scored at 3x its training length. Every one of the family's archs is built through
fairseq's parser and registry, decoded incrementally and run at 3x its length in-process in
tests/models/test_position_family.py (the CLI adds the same command-line path to each, at about 5 seconds
a process, so it runs a covering set); stock absolute positions run end to end in test_train.py; command
lines from lm_runs.py."""

import math

import pytest
import torch

from fairseq_urpe.models.architectures import variants
from tests.cli.lm_runs import eval_lm_args, load_checkpoint, num_updates, parse_eval_lm, train_args

# every kind but t5 (lm_runs.Trainings), each of RPE/URPE for most, dot-product-free twice (of the family's 24:
# tests/models)
VARIANTS = ["urpe_alibi", "log_dpf", "urpe_learned", "nope", "urpe_nope_dpf", "urpe_rope"]
TPS, UPDATES = 32, 6


@pytest.fixture(scope="module")
def family_runs(cli, brown_data, tmp_path_factory):
    """``{variant: (train result, checkpoint path, eval-lm result)}``."""
    assert set(VARIANTS) <= set(variants()), "a variant here is not registered"
    root = tmp_path_factory.mktemp("family")
    jobs = {
        v: ("train", train_args(brown_data, root / v, "--arch", f"transformer_lm_{v}_tiny", "--max-update", UPDATES,
                                "--disable-validation", "--no-save-optimizer-state", tps=TPS, max_tokens=512))
        for v in VARIANTS
    }
    trained = cli.run_many(jobs)
    evals = {}
    for v in VARIANTS:
        checkpoint = root / v / "checkpoint_last.pt"
        if trained[v].returncode == 0:
            evals[v] = ("eval-lm", eval_lm_args(brown_data, checkpoint, tps=3 * TPS))
    scored = cli.run_many(evals)
    return {v: (trained[v], root / v / "checkpoint_last.pt", scored.get(v)) for v in VARIANTS}


@pytest.mark.e2e
@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_trains_and_eval_lm_scores_every_valid_token(family_runs, brown_data, variant):
    trained, checkpoint, scored = family_runs[variant]
    trained.check()
    state = load_checkpoint(checkpoint)
    assert num_updates(state) == UPDATES
    assert state["cfg"]["model"]["_name"] == f"transformer_lm_{variant}_tiny"
    options = variants()[variant]
    assert state["cfg"]["model"]["rpe_kind"] == options["rpe_kind"]
    assert state["cfg"]["model"]["dot_product_free"] == options.get("dot_product_free", False)
    assert all(torch.isfinite(p).all() for p in state["model"].values())
    result = parse_eval_lm(scored.check().output)
    assert result.tokens == brown_data.tokens["valid"]
    assert math.isfinite(result.ppl) and 1 < result.ppl < brown_data.uniform_ppl
