"""Through the real ``fairseq-train`` and ``fairseq-eval-lm``, one variant of every kind of the registry
but T5 (whose RPE and URPE archs lm_runs.Trainings trains and test_eval_lm.py scores): each trains a few
updates and is scored at 3x its training length with a sliding ``--context-window``. The variants cycle
through URPE's ``C`` and dot-product-free attention (where the kind allows it), so the set covers RPE,
URPE and ``_dpf`` whatever kinds the registry holds. Every one of the family's archs is built through
fairseq's parser and registry, decoded incrementally and run at 3x its length in-process in
tests/models/test_position_family.py; stock absolute positions run end to end in test_train.py; command
lines from lm_runs.py."""

import math

import pytest
import torch

from fairseq_urpe.models.architectures import variants
from fairseq_urpe.models.position_kinds import POSITION_KINDS
from tests.checkpoints import load_checkpoint, num_updates
from tests.cli.lm_runs import eval_lm_args, parse_eval_lm, train_args

TPS, UPDATES = 32, 6
CYCLE = (("urpe", False), ("rpe", True), ("urpe", True), ("rpe", False))  # (C, dot-product-free) per kind in turn


def one_variant_per_kind():
    """The registry's kinds but T5, the i-th as CYCLE[i % 4] says (without ``_dpf`` where the kind needs Q K^T)."""
    chosen = []
    for i, (name, kind) in enumerate((n, k) for n, k in POSITION_KINDS.items() if n != "t5"):
        toeplitz, dpf = CYCLE[i % len(CYCLE)]
        part = kind.arch or name
        chosen.append(("urpe_" + part if toeplitz == "urpe" else part) + ("_dpf" if dpf and kind.dot_product_free else ""))
    return chosen


VARIANTS = one_variant_per_kind()


@pytest.fixture(scope="module")
def family_runs(cli, brown_data, tmp_path_factory):
    """``{variant: (train result, checkpoint path, eval-lm result)}``."""
    assert set(VARIANTS) <= set(variants()), "a variant here is not registered"
    assert {"rpe", "urpe"} == {"urpe" if "urpe" in v else "rpe" for v in VARIANTS} and any("_dpf" in v for v in VARIANTS)
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
            evals[v] = ("eval-lm", eval_lm_args(brown_data, checkpoint, "--context-window", 2 * TPS, tps=3 * TPS))
    scored = cli.run_many(evals)
    return {v: (trained[v], root / v / "checkpoint_last.pt", scored.get(v)) for v in VARIANTS}


@pytest.mark.e2e
@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_trains_and_eval_lm_with_a_context_window_scores_every_valid_token(family_runs, brown_data, variant):
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
    assert f"'context_window': {2 * TPS}" in scored.output  # every block of 32 scored after up to 64 of context
    assert result.tokens == brown_data.tokens["valid"]
    assert math.isfinite(result.ppl) and 1 < result.ppl < brown_data.uniform_ppl
