"""The kernel's self-check on first use, and what ``auto`` and ``fused`` do when it fails.

Failures are injected into the real kernel (under Triton's interpreter): a wrong output, a wrong
gradient, an exception at launch. ``auto`` must log one warning with the measured error and use the
dense path from then on; ``fused`` must raise naming the flag.
"""

import logging
import re

import pytest
import torch

pytest.importorskip("triton")

from fairseq_urpe.kernels import dispatch  # noqa: E402
from fairseq_urpe.kernels import fused_urpe_attention as kernel  # noqa: E402
from fairseq_urpe.kernels.self_check import KernelConfig, check_lengths, kernel_error  # noqa: E402
from tests.attention_builders import EMBED, make_t5_attention  # noqa: E402
from tests.reference import causal_mask  # noqa: E402

CONFIG = KernelConfig("cpu", torch.float64, 16, bias=True, toeplitz=True, padding=True, dropout=True)


@pytest.fixture
def checks(monkeypatch):
    """A fresh record of self-checks for the test, and the number of checks run."""
    monkeypatch.setattr(dispatch, "_BACKENDS", {})
    runs = []

    def counted(config):
        runs.append(config)
        return kernel_error(config)

    monkeypatch.setattr(dispatch, "kernel_error", counted)
    return runs


def inject(monkeypatch, fault):
    """Make the real kernel wrong in one way."""
    forward, backward = kernel.launch_forward, kernel.launch_backward
    if fault == "output":
        def launch_forward(*args, **kwargs):
            forward(*args, **kwargs)
            args[6].mul_(1.001)  # out, 0.1% off
        monkeypatch.setattr(kernel, "launch_forward", launch_forward)
    elif fault == "gradient":
        def launch_backward(*args, **kwargs):
            backward(*args, **kwargs)
            args[10].mul_(1.01)  # dq
        monkeypatch.setattr(kernel, "launch_backward", launch_backward)
    else:
        def launch_forward(*args, **kwargs):
            raise RuntimeError("out of resource: shared memory, Required: 262144, Hardware limit: 232448")
        monkeypatch.setattr(kernel, "launch_forward", launch_forward)


@pytest.mark.every_triton  # the real kernel checked: again under the second triton (scripts/test.sh)
def test_the_real_kernel_passes_once_per_configuration_and_leaves_the_random_state_alone(checks):
    state = torch.random.get_rng_state()
    assert dispatch.fused_backend("fused", CONFIG) is dispatch.fused_backend("fused", CONFIG) is not None
    assert checks == [CONFIG]  # checked once, remembered
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.parametrize("fault,message", [
    # A wrong output also makes the gradients wrong (D_i = dO_i . O_i).
    ("output", r"output, gradient of the q, .* differ from the reference at T = \d+: max error / max value = \d"),
    ("gradient", r": gradient of the q differs from the reference at T = \d+: max error / max value = 0\.01 in the "
                 r"gradient of q"),
    ("exception", r"the kernel raised RuntimeError: out of resource: shared memory"),
])
def test_auto_falls_back_with_one_warning_and_fused_raises_naming_the_flag(fault, message, checks, monkeypatch, caplog):
    inject(monkeypatch, fault)
    with caplog.at_level(logging.WARNING, logger=dispatch.__name__):
        assert dispatch.fused_backend("auto", CONFIG) is None
        assert dispatch.fused_backend("auto", CONFIG) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "fused attention failed its self-check on cpu, float64, head dim 16, bias + Toeplitz C" in warnings[0]
    assert re.search(message, warnings[0]), warnings[0]
    assert "dense attention for the rest of the process" in warnings[0]
    with pytest.raises(RuntimeError, match=f"--urpe-attention-impl fused: the fused kernel failed its self-check.*{message}"):
        dispatch.fused_backend("fused", CONFIG)
    assert checks == [CONFIG, CONFIG]  # one check per (impl, configuration)


def test_auto_attention_module_runs_dense_after_a_failed_self_check(checks, monkeypatch, caplog):
    """The wiring: a module in auto where the kernel could run (pretended on CPU) checks it, and after a
    failure computes with the dense path, which gives the dense module's result."""
    monkeypatch.setattr(dispatch, "_why_not_fused", lambda *args, **kwargs: None)
    calls = []
    real = dispatch.FusedBackend.run
    monkeypatch.setattr(dispatch.FusedBackend, "run", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = torch.randn(19, 2, EMBED, dtype=torch.float64)
    auto, dense = make_t5_attention("urpe_unique", seed=1), make_t5_attention("urpe_unique", seed=1)
    dense.attention_impl = "dense"
    want = dense(x, x, x, attn_mask=causal_mask(19), need_weights=False)[0]
    got = auto(x, x, x, attn_mask=causal_mask(19), need_weights=False)[0]  # the check passes: fused
    assert calls == [1] and len(checks) == 1
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)

    inject(monkeypatch, "output")
    monkeypatch.setattr(dispatch, "_BACKENDS", {})
    with caplog.at_level(logging.WARNING, logger=dispatch.__name__):
        for _ in range(2):
            got = auto(x, x, x, attn_mask=causal_mask(19), need_weights=False)[0]
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert calls == [1] and len(checks) == 2  # dense both times, checked once
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_auto_does_not_choose_full_precision_float32():
    """float32 without TF32 would run the kernel without tensor cores: auto keeps the dense path."""
    x = torch.zeros(2, 3, 8, 16)
    allowed = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert "float32 without TF32" in dispatch._why_not_fused(x, 0.0, True, forced=False)
        assert "float32" not in (dispatch._why_not_fused(x, 0.0, True, forced=True) or "")  # fused: the user's choice
        torch.backends.cuda.matmul.allow_tf32 = True
        assert "tensors are on cpu" in dispatch._why_not_fused(x, 0.0, True, forced=False)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed


def test_the_check_runs_under_inference_mode_and_no_grad(checks):
    """The first call may come from evaluation (fairseq-eval-lm under no_grad, or inference_mode)."""
    config = CONFIG._replace(dropout=False, padding=False)
    with torch.inference_mode():
        assert dispatch.fused_backend("fused", config) is not None
    with torch.no_grad():
        assert kernel_error(config._replace(toeplitz=False)) is None


def test_float32_is_checked_again_when_tf32_is_switched(checks):
    """The kernel reads torch's TF32 switch on every call: with TF32 and without are two compiled variants,
    each checked on its first use (a verdict for one says nothing of the other)."""
    x = torch.zeros(1, 2, 19, 16, requires_grad=True)
    allowed = torch.backends.cuda.matmul.allow_tf32
    try:
        for tf32 in (False, True, False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            assert dispatch.attention_backend("fused", x, causal_mask(19, torch.float32), False, False, 0.0) is not None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    assert [config.tf32 for config in checks] == [False, True]
    assert checks[1].describe().endswith(", TF32") and not checks[0].describe().endswith("TF32")


def test_the_check_runs_in_the_callers_layout_and_scale_at_a_multiple_of_128_and_an_odd_length(monkeypatch):
    """What the attention module launches: q, k, v views of (T, B, H d) projections, scale 1 (q scaled
    before), and both a length divisible by 16 (a compiled variant of its own) and one that is not."""
    seen, forward = [], kernel.launch_forward

    def launch_forward(q, k, v, *args, **kwargs):
        seen.append((q.size(2), q.stride(), k.stride(), v.stride(), args[6]))  # args[6]: the scale
        return forward(q, k, v, *args, **kwargs)

    monkeypatch.setattr(kernel, "launch_forward", launch_forward)
    assert kernel_error(CONFIG) is None
    lengths = [length for length, *_ in seen]
    assert sorted(lengths) == sorted(check_lengths(torch.device("cpu")))
    assert any(t % 16 == 0 for t in lengths) and any(t % 2 == 1 for t in lengths)
    on_gpu = check_lengths(torch.device("cuda"))  # a multiple of 128 (training's 2048 is one) and an odd one
    assert any(t % 128 == 0 for t in on_gpu) and any(t % 2 == 1 and t > 2 * 128 for t in on_gpu)
    batch, heads, d = 2, 2, CONFIG.head_dim
    for length, *strides, scale in seen:
        assert strides == [(heads * d, d, batch * heads * d, 1)] * 3 and scale == 1.0


@pytest.mark.parametrize("only_when,length", [
    (lambda q: q.size(2) % 16 == 0, r"64"),  # wrong only for lengths divisible by 16
    (lambda q: q.size(2) % 2 == 1, r"45"),  # ... only for odd lengths
    (lambda q: q.stride(2) != q.size(3), r"\d+"),  # ... only in the permuted layout
], ids=["multiple_of_16", "odd_length", "permuted_layout"])
def test_a_fault_in_one_specialisation_is_caught(only_when, length, monkeypatch):
    forward = kernel.launch_forward

    def launch_forward(q, *args, **kwargs):
        forward(q, *args, **kwargs)
        if only_when(q):
            args[5].mul_(1.001)  # out, 0.1% off

    monkeypatch.setattr(kernel, "launch_forward", launch_forward)
    assert re.search(rf"differ from the reference at T = {length}:", kernel_error(CONFIG) or "")
