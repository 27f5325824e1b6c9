"""The kernel uses the triton that comes with the user's torch: no exact triton pin anywhere a GPU user's
install reads, and a supported range checked at first use (``auto`` warns once and runs dense, ``fused``
raises naming the flag)."""

import ast
import logging
import os
import re

import pytest
import torch

from fairseq_urpe.kernels import dispatch
from tests.reference import causal_mask

pytestmark = pytest.mark.every_triton  # the range check reads the installed triton: both tested ones (scripts/test.sh)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def install_requires():
    """``install_requires`` of setup.py, read from its source (setup.py is not imported: it calls setup())."""
    tree = ast.parse(open(os.path.join(REPO, "setup.py"), encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no install_requires")


def requirement_lines(path):
    lines = open(os.path.join(REPO, path), encoding="utf-8").read().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def test_install_requirements_pin_no_triton_so_a_cuda_torch_keeps_its_own():
    """torch 2.13.0's CUDA build pins triton==3.7.1 (every CUDA torch pins its own): a triton requirement
    of ours would conflict with it (pip: ResolutionImpossible) or replace it."""
    requirements = install_requires() + requirement_lines("requirements.txt")
    assert not [r for r in requirements if re.match(r"triton\b", r, re.I)], requirements
    torch_requirement = [r for r in install_requires() if re.match(r"torch\b", r)]
    assert torch_requirement and "==" not in torch_requirement[0]  # the user's torch, any recent one


def test_env_script_installs_a_triton_only_where_torch_brought_none():
    lines = open(os.path.join(REPO, "scripts", "env.sh"), encoding="utf-8").read().splitlines()
    installs = [i for i, line in enumerate(lines) if "$TRITON_SPEC" in line and "pip" in line]
    assert len(installs) == 1, installs
    guard = "\n".join(lines[installs[0] - 4:installs[0]])
    assert 'if ! "$VENV/bin/python" -c "import triton"' in guard, guard
    assert "--no-deps" in lines[installs[0]]  # never touches torch


@pytest.mark.parametrize("version", ["3.7.1", "3.8.0", "3.9.0", "3.9.1+gitabc"])
def test_supported_triton_versions_pass_the_check(version):
    assert dispatch.triton_version_problem(version) is None


@pytest.mark.parametrize("version", ["3.6.0", "3.2.0", "3.10.0", "4.0.0", "nightly"])
def test_other_triton_versions_are_refused_with_the_supported_range(version):
    problem = dispatch.triton_version_problem(version)
    assert problem.startswith(f"triton {version} is not a version the fused kernel supports (3.7 <= triton < 3.10")
    assert "tested: 3.7.1, 3.9.0" in problem


def test_installed_triton_is_a_supported_one():
    """The environment the suite runs in (either of CI's two tritons) is one the check accepts."""
    pytest.importorskip("triton")
    assert dispatch.triton_version_problem(dispatch.triton_version()) is None


def test_unsupported_triton_auto_warns_once_and_runs_dense_fused_raises_naming_the_flag(monkeypatch, caplog):
    pytest.importorskip("triton")
    monkeypatch.setattr(dispatch, "triton_version", lambda: "3.2.0")
    monkeypatch.setattr(dispatch, "_LOGGED", set())
    x = torch.zeros(2, 3, 8, 16, dtype=torch.float64)
    mask = causal_mask(8, torch.float32)
    with pytest.raises(RuntimeError, match=r"--urpe-attention-impl fused cannot run here: triton 3\.2\.0 is not a "
                                           r"version the fused kernel supports .*Use --urpe-attention-impl auto"):
        dispatch.attention_backend("fused", x, mask, False, False, 0.0)
    # auto: pretend a GPU (on CPU auto never interprets), so only the triton version stands in the way
    monkeypatch.setattr(dispatch, "_why_not_fused",
                        lambda *a, **k: dispatch.triton_version_problem(dispatch.triton_version()))
    with caplog.at_level(logging.WARNING, logger=dispatch.__name__):
        assert dispatch.attention_backend("auto", x, mask, False, False, 0.0) is None
        assert dispatch.attention_backend("auto", x, mask, False, False, 0.0) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "triton 3.2.0 is not a version the fused kernel supports" in warnings[0], warnings
    assert "dense attention runs instead" in warnings[0]
