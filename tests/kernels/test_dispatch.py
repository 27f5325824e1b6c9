"""The dispatch between the fused kernel and the dense path, and the fused path inside the attention and the model.

The fused runs use Triton's interpreter on CPU (``--urpe-attention-impl fused`` with TRITON_INTERPRET=1,
set in conftest.py), in float64, so fused and dense must agree to rounding.
"""

import logging

import pytest
import torch

pytest.importorskip("triton")

from fairseq_urpe.kernels import dispatch  # noqa: E402
from fairseq_urpe.kernels.dispatch import attention_backend, is_future_mask  # noqa: E402
from tests.models.conftest import build_lm, dict_dir  # noqa: E402,F401  (fixtures)
from tests.attention_builders import EMBED, HEADS, make_bias, make_t5_attention, table_cases  # noqa: E402
from tests.reference import causal_mask  # noqa: E402


def q_like(device="cpu", dtype=torch.float32, length=6, head_dim=16):
    return torch.zeros(2, 3, length, head_dim, dtype=dtype, device=device)


def decide(impl, q=None, attn_mask="causal", incremental=False, need_weights=False, dropout=0.0, dot_product=True):
    q = q_like() if q is None else q
    mask = causal_mask(q.size(2), torch.float32) if attn_mask == "causal" else attn_mask
    return attention_backend(impl, q, mask, incremental, need_weights, dropout, dot_product) is not None


def test_fused_is_chosen_only_for_full_causal_calls_without_weights():
    assert decide("fused")  # CPU under the interpreter: forced fused runs
    assert not decide("dense")
    assert not decide("fused", incremental=True)
    assert not decide("fused", need_weights=True)
    assert not decide("fused", attn_mask=None)  # no mask: full-context attention
    assert not decide("fused", attn_mask=torch.zeros(6, 6))
    assert not decide("auto")  # auto never interprets on CPU


@pytest.mark.parametrize(
    "kwargs,reason",
    [
        (dict(dropout=1.0), "attention dropout 1.0 is not in"),
        (dict(dot_product=False), "dot-product-free"),
        (dict(q=q_like(head_dim=160)), "head dim 160"),
    ],
)
def test_forced_fused_names_the_flag_and_auto_falls_back(kwargs, reason):
    with pytest.raises(RuntimeError, match=f"--urpe-attention-impl fused cannot run here: .*{reason}"):
        decide("fused", **kwargs)
    assert not decide("auto", **kwargs)


def test_forced_fused_on_cpu_without_the_interpreter_or_without_triton_is_an_error(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="--urpe-attention-impl fused cannot run here: tensors are on cpu"):
        decide("fused")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(dispatch, "triton_available", lambda: False)
    with pytest.raises(RuntimeError, match="triton is not installed"):
        decide("fused")
    with pytest.raises(ValueError, match="--urpe-attention-impl must be one of auto, dense, fused"):
        decide("flash")


def test_deterministic_algorithms_run_the_kernels_deterministic_backward_without_a_warning():
    """Under torch's deterministic algorithms (``warn_only`` or not) the fused path runs, in a configuration
    of its own where a backward runs (its backward without atomics: test_deterministic_backward.py), and
    says nothing about nondeterminism."""
    import warnings

    from fairseq_urpe.kernels.dispatch import call_config

    q = q_like().requires_grad_()
    for warn_only in (False, True):
        torch.use_deterministic_algorithms(True, warn_only=warn_only)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert decide("fused") and decide("fused", q)
            assert call_config(q, 0.0).deterministic and "deterministic" in call_config(q, 0.0).describe()
            with torch.no_grad():  # no backward: the forward alone, the same variant as without the switch
                assert not call_config(q, 0.0).deterministic
        finally:
            torch.use_deterministic_algorithms(False)
        assert not [w for w in caught if "determinis" in str(w.message)], [str(w.message) for w in caught]
    assert not call_config(q, 0.0).deterministic


def test_future_mask_check_accepts_only_fairseqs_causal_mask_and_notices_in_place_changes():
    from fairseq.utils import fill_with_neg_inf

    buffer = torch.triu(fill_with_neg_inf(torch.zeros([10, 10])), 1)  # fairseq's buffered_future_mask
    assert is_future_mask(buffer[:7, :7], 7) and is_future_mask(buffer[:7, :7], 7)  # the second from the cache
    assert not is_future_mask(buffer[:7, :7], 8)
    assert not is_future_mask(buffer.t().contiguous()[:7, :7], 7)
    assert not is_future_mask(torch.full((7, 7), -1e9).triu(1), 7)
    buffer[2, 1] = -5.0  # in place: the version counter changes, so the cache is not trusted
    assert not is_future_mask(buffer[:7, :7], 7)


class Calls(list):
    """The calls of the fused backend's ``run``; ``tables``: the (bias, c) tables each call passed."""

    def __init__(self):
        super().__init__()
        self.tables = []


def spy_runs(monkeypatch, calls):
    """Make every fused backend's ``run`` also append to ``calls``."""
    run = dispatch.FusedBackend.run

    def wrapped(self, *args, **kwargs):
        calls.append(1)
        if isinstance(calls, Calls):
            calls.tables.append(args[3:5])
        return run(self, *args, **kwargs)

    monkeypatch.setattr(dispatch.FusedBackend, "run", wrapped)


@pytest.fixture
def fused_calls(monkeypatch):
    """Calls of the fused path from the attention module, counted."""
    calls = Calls()
    spy_runs(monkeypatch, calls)
    return calls


@pytest.mark.parametrize("kind", ["rpe", "urpe_bucketed", "urpe_unique"])
def test_attention_module_fused_equals_dense_forward_and_backward(kind, fused_calls):
    length, batch = 50, 2  # > max_distance 10: clamped and log buckets, and far tiles in every kernel
    fused, dense = make_t5_attention(kind, seed=length), make_t5_attention(kind, seed=length)
    fused.attention_impl, dense.attention_impl = "fused", "dense"
    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)
    padding = torch.zeros(batch, length, dtype=torch.bool)
    padding[0, -3:] = True  # right padding
    padding[1, :2] = True  # left padding: queries 0 and 1 of sequence 1 see only pads
    upstream = torch.randn(length, batch, EMBED, dtype=torch.float64)
    outs, grads = [], []
    for attn in (fused, dense):
        out, weights = attn(x, x, x, key_padding_mask=padding, attn_mask=causal_mask(length), need_weights=False)
        assert weights is None
        outs.append(out)
        grads.append(torch.autograd.grad(out, [x] + list(attn.parameters()), upstream))
    assert len(fused_calls) == 1  # the fused module used the kernel, the dense one did not
    assert fused_calls.tables[0][0].size(1) == fused.positions.position_bias.constant_from + 1 <= 11  # cut short
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-10)
    names = ["x"] + [n for n, _ in fused.named_parameters()]
    for name, got, want in zip(names, *grads):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10, msg=lambda m: f"gradient of {name}: {m}")


def test_model_fused_equals_dense_and_generation_uses_dense(build_lm, fused_calls):  # noqa: F811
    calls = fused_calls
    models = []
    for impl in ("fused", "dense"):
        model, cfg = build_lm("transformer_lm_urpe_tiny", "--urpe-attention-impl", impl, "--dropout", "0",
                              tokens_per_sample=24)
        assert cfg.model.urpe_attention_impl == impl
        models.append(model.double())
    models[0].load_state_dict(models[1].state_dict())
    torch.manual_seed(2)
    for name, p in models[1].named_parameters():  # move b and c off their initial 0 and 1, in both
        if "position_bias" in name or "toeplitz" in name:
            p.data.uniform_(0.2, 1.5)
    models[0].load_state_dict(models[1].state_dict())
    tokens = torch.randint(4, 40, (2, 21))
    tokens[0, -4:] = 1  # padding index: fairseq passes a key padding mask
    logits, grads = [], []
    for model in models:
        model.train()
        out = model(tokens)[0]
        logits.append(out)
        grads.append(torch.autograd.grad(out.logsumexp(-1).sum(), list(model.parameters())))
    assert len(calls) == len(models[0].decoder.layers)  # every fused layer, once
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-10, atol=1e-10)
    for (name, _), got, want in zip(models[0].named_parameters(), *grads):
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10, msg=lambda m: f"gradient of {name}: {m}")

    # Incremental decoding with the fused model takes the dense path and reproduces the full forward.
    model = models[0].eval()
    calls.clear()
    state = {}
    with torch.no_grad():
        full = model(tokens[1:, :8])[0]
        steps = [model(tokens[1:, : t + 1], incremental_state=state)[0] for t in range(8)]
    assert len(calls) == len(model.decoder.layers)  # only the full forward
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("bias_case", table_cases(), ids=str)
def test_every_bias_kind_fused_equals_dense_with_unique_toeplitz(bias_case, fused_calls):
    """The kernel takes each kind's table by distance (the modules' shared call shape) and its gradient."""
    from fairseq_urpe.modules import RelativeMultiheadAttention, ToeplitzReweighting

    length, batch = 19, 2
    attns = []
    for impl in ("fused", "dense"):
        torch.manual_seed(7)
        bias = make_bias(bias_case)
        toeplitz = ToeplitzReweighting(HEADS, "unique", max_distance=6)
        attn = RelativeMultiheadAttention(EMBED, HEADS, bias, toeplitz, attention_impl=impl).double()
        for p in attn.parameters():
            torch.nn.init.uniform_(p, 0.1, 1.0)  # b, c and projections away from their initial values
        attns.append(attn)
    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)
    padding = torch.zeros(batch, length, dtype=torch.bool)
    padding[1, :3] = True
    upstream = torch.randn(length, batch, EMBED, dtype=torch.float64)
    results = []
    for attn in attns:
        out = attn(x, x, x, key_padding_mask=padding, attn_mask=causal_mask(length), need_weights=False)[0]
        results.append((out, torch.autograd.grad(out, [x] + list(attn.parameters()), upstream)))
    assert len(fused_calls) == 1
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-10, atol=1e-10)
    names = ["x"] + [n for n, _ in attns[0].named_parameters()]
    for name, got, want in zip(names, results[0][1], results[1][1]):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10, msg=lambda m: f"gradient of {name}: {m}")


def test_a_failing_first_launch_of_a_new_specialisation_falls_back_in_auto_and_raises_in_fused(monkeypatch, caplog):
    """A launch signature the self-check did not compile (here: lengths divisible by 16, whose backward is
    made to fail as out of shared memory would) is tried on the call's own inputs first: auto warns once
    and computes that signature densely (the dense module's result), other signatures still run fused;
    fused raises naming the flag."""
    from fairseq_urpe.kernels import fused_urpe_attention as kernel

    monkeypatch.setattr(dispatch, "_why_not_fused", lambda *args, **kwargs: None)  # as on a GPU
    monkeypatch.setattr(dispatch, "kernel_error", lambda config: None)  # the self-check passes
    monkeypatch.setattr(dispatch, "_BACKENDS", {})
    monkeypatch.setattr(dispatch, "_LOGGED", set())
    backward, launches = kernel.launch_backward, []

    def launch_backward(q, *args, **kwargs):
        launches.append(q.size(2))
        if q.size(2) % 16 == 0:
            raise RuntimeError("out of resource: shared memory, Required: 132096, Hardware limit: 101376")
        return backward(q, *args, **kwargs)

    monkeypatch.setattr(kernel, "launch_backward", launch_backward)
    fused_calls = []
    spy_runs(monkeypatch, fused_calls)
    auto, dense = make_t5_attention("urpe_unique", seed=4), make_t5_attention("urpe_unique", seed=4)
    dense.attention_impl = "dense"
    with caplog.at_level(logging.WARNING, logger=dispatch.__name__):
        for length in (32, 32, 19):
            x = torch.randn(length, 2, EMBED, dtype=torch.float64, requires_grad=True)
            got = auto(x, x, x, attn_mask=causal_mask(length), need_weights=False)[0]
            want = dense(x, x, x, attn_mask=causal_mask(length), need_weights=False)[0]
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
            got.sum().backward()  # T = 32 computed densely: its backward never reaches the kernel
    assert launches == [32, 19, 19]  # T = 32 tried once (the first launch); T = 19: its check, then the call
    assert len(fused_calls) == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "the fused kernel failed at its first launch for cpu, float64, B=2, H=3, T=32" in warnings[0]
    assert "out of resource: shared memory" in warnings[0] and "dense attention for the rest of the process" in warnings[0]
    auto.attention_impl = "fused"
    x = torch.randn(32, 2, EMBED, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"--urpe-attention-impl fused: the fused kernel failed at its first launch "
                                           r"for .*T=32.*out of resource"):
        auto(x, x, x, attn_mask=causal_mask(32), need_weights=False)


def test_launch_key_tells_triton_specialisations_apart():
    """Lengths or strides divisible by 16 or equal to 1, and misaligned pointers, compile separately."""
    def key(length, offset=0, **kwargs):
        x = torch.zeros(2 * 3 * length * 16 + offset)[offset:].view(2, 3, length, 16)
        return dispatch.launch_key(x, x, x, **kwargs)

    assert key(19) == key(21)  # the same specialisation
    assert key(32) == key(48)
    assert len({key(19), key(32), key(1), key(19, offset=1), key(19, dropout_p=0.1)}) == 5


def test_the_path_taken_is_logged_once_per_distinct_reason(monkeypatch, caplog):
    """Each run's log names its attention path: one INFO line per distinct path and reason, not per call."""
    monkeypatch.setattr(dispatch, "_LOGGED", set())
    with caplog.at_level(logging.INFO, logger=dispatch.__name__):
        for _ in range(3):
            assert not decide("dense")
            assert not decide("auto", q_like(dtype=torch.float16))  # CPU tensors
            assert not decide("auto", incremental=True)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("attention path: ")]
    assert lines == ["attention path: dense (--urpe-attention-impl dense)",
                     "attention path: dense (tensors are on cpu; the kernel needs CUDA (or TRITON_INTERPRET=1 on CPU, "
                     "for tests))",
                     "attention path: dense (incremental decoding, which always runs dense)"], lines
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=dispatch.__name__):
        assert decide("fused", q_like(dtype=torch.float64))  # the interpreter, as every fused test here
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("attention path: fused (cpu, float64")]


def attention_impl_help() -> str:
    from fairseq_urpe.models.relative_position_config import RelativePositionConfig

    return " ".join(RelativePositionConfig.__dataclass_fields__["urpe_attention_impl"].metadata["help"].split())


def test_help_of_attention_impl_says_what_auto_does():
    """--urpe-attention-impl's help, as fairseq-train prints it, names every condition under which the
    dispatch sends an ``auto`` call to the dense path, each driven here to its reason; attention dropout is
    not among them (the kernel drops inside)."""
    text = attention_impl_help()
    assert "no attention dropout" not in text and "without attention dropout" not in text, text
    assert "'fused': the kernel, or an error naming this flag where it cannot run (for GPU runs that must not fall back)" in text
    assert "The log names the path taken ('attention path: ...')" in text
    assert decide("fused", dropout=0.1)  # the kernel takes attention dropout (here under the interpreter)
    x = q_like()
    reasons = {  # phrase of the help: the dispatch's reason for dense
        "CUDA tensors": dispatch._why_not_fused(q_like(dtype=torch.float16), 0.0, True, forced=False),
        "head dim <= 128": dispatch._why_not_fused(q_like(head_dim=160), 0.0, True, forced=False),
        "batch x heads <= 65535": dispatch._why_not_fused(torch.zeros(65536, 1, 1, 16), 0.0, True, forced=False),
        "dot-product scores": dispatch._why_not_fused(x, 0.0, False, forced=False),
        "float32 with TF32 allowed (torch.backends.cuda.matmul.allow_tf32)":
            dispatch._why_not_fused(x, 0.0, True, forced=False),
        "a supported triton": dispatch.triton_version_problem("3.2.0"),
    }
    assert "tensors are on cpu" in reasons["CUDA tensors"]
    assert "float32 without TF32" in reasons["float32 with TF32 allowed (torch.backends.cuda.matmul.allow_tf32)"]
    for phrase, reason in reasons.items():
        assert phrase in text, phrase
        assert reason is not None, phrase
    torch.use_deterministic_algorithms(True)
    try:  # not a reason for dense: the kernel's deterministic backward runs
        assert "use_deterministic_algorithms" not in (dispatch._why_not_fused(x, 0.0, True, forced=False) or "")
    finally:
        torch.use_deterministic_algorithms(False)
    assert "Under torch.use_deterministic_algorithms the kernel's backward adds nothing by atomics" in text
    for phrase, call in (("fairseq's causal mask", dict(attn_mask=None)), ("no attention weights asked for",
                         dict(need_weights=True)), ("not incremental decoding", dict(incremental=True))):
        assert phrase in text and not decide("fused", **call), phrase
    assert "first-use self-check in this configuration and the first launch of this launch signature" in text


class LaunchSpy:
    """A Triton kernel whose launches also report their constexprs ``wanted`` to ``record(name, values)``."""

    WANTED = ("FAR_SUMS", "FAR_DQ", "BIAS_GRAD", "C_GRAD")

    def __init__(self, kernel, name, record):
        self.kernel, self.name, self.record = kernel, name, record

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def run(*args, **kwargs):
            self.record(self.name, {k: kwargs[k] for k in self.WANTED if k in kwargs})
            return launch(*args, **kwargs)

        return run


def test_a_no_grad_call_and_a_frozen_table_call_each_check_their_own_variant_first(monkeypatch):
    """The forward stores the far share (FAR_SUMS) only where the tables get gradients: a call under
    no_grad and one with frozen tables run the FAR_SUMS=False forward (the first without a backward, the
    second with a backward that adds no table gradients). Each is a configuration of its own with a
    self-check of its own, and each first launch runs, on the call's inputs, the variant the call runs."""
    from fairseq_urpe.kernels import fused_urpe_attention as kernel

    from fairseq_urpe.kernels import self_check

    monkeypatch.setattr(dispatch, "_BACKENDS", {})
    monkeypatch.setattr(self_check, "check_lengths", lambda device: (40,))  # one length: far tiles and near ones
    configs, self_checks, checks, current = [], [], [], [None]

    def spied(check, launches):
        def run(*args, **kwargs):
            current[0] = []
            try:
                return check(*args, **kwargs)
            finally:
                launches.append(current[0])
                current[0] = None
        return run

    real_error = spied(dispatch.kernel_error, self_checks)
    monkeypatch.setattr(dispatch, "kernel_error", lambda config: configs.append(config) or real_error(config))
    monkeypatch.setattr(dispatch, "first_launch_error", spied(dispatch.first_launch_error, checks))

    def record(name, values):
        if current[0] is not None:
            current[0].append((name, values))

    for name in ("forward_kernel", "dq_kernel"):
        monkeypatch.setattr(kernel, name, LaunchSpy(getattr(kernel, name), name, record))
    length, batch = 40, 1  # tables constant from distance 10 on: far tiles in every kernel
    fused, dense = make_t5_attention("urpe_unique", seed=5), make_t5_attention("urpe_unique", seed=5)
    fused.attention_impl, dense.attention_impl = "fused", "dense"
    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)

    def run(attn):
        return attn(x, x, x, attn_mask=causal_mask(length), need_weights=False)[0]

    run(fused).sum().backward()  # training: table gradients, the far share
    with torch.no_grad():
        got = run(fused)
        torch.testing.assert_close(got, run(dense), rtol=1e-10, atol=1e-10)
    for attn in (fused, dense):
        for name, p in attn.named_parameters():
            if "proj" not in name:  # the position tables
                p.requires_grad_(False)
    out = run(fused)
    want = run(dense)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    assert torch.autograd.grad(out.sum(), x)[0].allclose(torch.autograd.grad(want.sum(), x)[0], rtol=1e-9, atol=1e-10)
    with torch.no_grad():
        run(fused)  # no_grad again: checked already
    assert [(c.backward, c.bias_grad, c.c_grad) for c in configs] == [(True, True, True), (False, False, False),
                                                                      (True, False, False)]
    for launches in (self_checks, checks):  # the self-check of each configuration, and its first launch
        forward = [[values["FAR_SUMS"] for name, values in check if name == "forward_kernel"] for check in launches]
        dq = [[values for name, values in check if name == "dq_kernel"] for check in launches]
        assert forward == [[True], [False], [False]]
        assert dq[0] and all(v["FAR_SUMS"] and v["BIAS_GRAD"] and v["C_GRAD"] for v in dq[0])
        assert dq[1] == []  # no backward under no_grad
        assert dq[2] and not any(v["FAR_SUMS"] or v["BIAS_GRAD"] or v["C_GRAD"] for v in dq[2])


def count_resolutions(monkeypatch):
    """The keys of every :class:`StaticDispatch` resolved, and the dispatch-table reads, from now on."""
    resolved, reads = [], []
    init, read = dispatch.StaticDispatch.__init__, dispatch.dispatch_table.read_table

    def counted_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        resolved.append(self.key)

    monkeypatch.setattr(dispatch.StaticDispatch, "__init__", counted_init)
    monkeypatch.setattr(dispatch.dispatch_table, "read_table", lambda path: reads.append(path) or read(path))
    fused_static = dispatch.FusedStatic.of
    monkeypatch.setattr(dispatch.FusedStatic, "of", lambda *args, **kwargs: reads.append("fused static")
                        or fused_static(*args, **kwargs))
    return resolved, reads


def test_the_configuration_part_of_the_dispatch_is_resolved_once_per_module_device_and_dtype(monkeypatch):
    """The attention resolves what depends only on its configuration and its tensors' device, dtype and head dim
    (impl, why the kernel can never run, the dispatch table's entries) at its first call, and not again on
    later calls, training or decoding; a move to another dtype and a changed ``attention_impl`` resolve anew."""
    resolved, reads = count_resolutions(monkeypatch)
    attn = make_t5_attention("urpe_bucketed")
    attn.attention_impl = "auto"
    x = torch.randn(12, 2, EMBED, dtype=torch.float64, requires_grad=True)
    for _ in range(3):
        attn(x, x, x, attn_mask=causal_mask(12), need_weights=False)[0].sum().backward()
        attn(x, x, x, attn_mask=causal_mask(12), need_weights=True)
    state = {}
    for step in range(4):  # incremental decoding, one query per step
        token = x[step : step + 1]
        attn(token, token, token, incremental_state=state, need_weights=False)
    key = ("auto", True, torch.device("cpu"), torch.float64, EMBED // HEADS)
    assert resolved == [key] and reads == ["fused static", dispatch.dispatch_table.table_path()]
    attn.float()
    y = x.detach().float()
    out = attn(y, y, y, attn_mask=causal_mask(12, torch.float32), need_weights=False)[0]
    assert out.dtype == torch.float32 and resolved[1:] == [key[:3] + (torch.float32,) + key[4:]]
    attn.attention_impl = "dense"
    attn(y, y, y, attn_mask=causal_mask(12, torch.float32), need_weights=False)
    assert resolved[2:] == [("dense", True, torch.device("cpu"), torch.float32, EMBED // HEADS)]
    assert len(reads) == 4  # auto in float32 resolved the kernel's part and read the table; dense does neither


def test_a_move_resolves_the_dispatch_anew_and_a_copy_keeps_its_resolution(monkeypatch):
    """The resolved part is keyed by device and dtype: after ``.float()`` the fused module decides anew (here,
    with the interpreter switched off meanwhile, it refuses naming the flag, as a fresh module does), while
    calls in the dtype it resolved keep their resolution, as does a deep copy (fairseq's EMA)."""
    import copy

    calls = []
    spy_runs(monkeypatch, calls)
    attn = make_t5_attention("urpe_bucketed")
    attn.attention_impl = "fused"
    x = torch.randn(20, 2, EMBED, dtype=torch.float64)
    first = attn(x, x, x, attn_mask=causal_mask(20), need_weights=False)[0]
    assert len(calls) == 1
    ema = copy.deepcopy(attn)
    monkeypatch.delenv("TRITON_INTERPRET")
    again = attn(x, x, x, attn_mask=causal_mask(20), need_weights=False)[0]  # resolved with the interpreter on
    torch.testing.assert_close(ema(x, x, x, attn_mask=causal_mask(20), need_weights=False)[0], first, rtol=0, atol=0)
    assert len(calls) == 3
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    attn.float()
    y = x.float()
    with pytest.raises(RuntimeError, match=r"--urpe-attention-impl fused cannot run here: tensors are on cpu"):
        attn(y, y, y, attn_mask=causal_mask(20, torch.float32), need_weights=False)
    fresh = make_t5_attention("urpe_bucketed")
    fresh.attention_impl = "fused"
    with pytest.raises(RuntimeError, match=r"--urpe-attention-impl fused cannot run here: tensors are on cpu"):
        fresh(x, x, x, attn_mask=causal_mask(20), need_weights=False)
