"""Which attention computes a call: the fused Triton kernel, PyTorch's FlexAttention or the dense path.

``--urpe-attention-impl`` (``impl`` here):
  - ``dense``: always the dense path.
  - ``auto`` (default): where the measured dispatch table (:mod:`.dispatch_table`, written by a GPU run of
    ``benchmarks/gpu_check.sh``) holds the call's configuration, the path it names, where that path can run
    this call; otherwise the built-in order: the fused kernel where it can run (a CUDA tensor, Triton importable, float16 or
    bfloat16, or float32 where torch allows TF32 matmuls, head dim <= 128, dot-product scores, an
    attention-dropout rate its 8-bit thresholds hold within 10%: :mod:`.dropout_rate`), the call is one it
    computes, and the kernel passed its self-check in this configuration; the dense path otherwise.
  - ``fused``: the fused kernel for every call it computes (float32 included, TF32 or not); an error
    naming the flag where this machine or configuration cannot run it or the self-check failed (on CPU
    it runs under Triton's interpreter when ``TRITON_INTERPRET=1``, slowly: that is how the tests run it).
  - ``flex``: PyTorch's compiled ``flex_attention`` (:mod:`.flex_attention`: the bias as a ``score_mod``,
    URPE's C through the log-sum-exp). Refused, naming the reason, with attention dropout (flex has
    none), for a backward on CPU (flex has none there), for URPE on CPU (compiled flex on CPU returns no
    log-sum-exp) and with ``torch.use_deterministic_algorithms(True)`` (its table gradients are atomic
    adds). Lengths are padded to a multiple of 128; a call whose compiled shape would pass torch's
    recompile limit runs dense, logged (:class:`FlexBackend`).

Triton: the kernel uses the triton that came with torch (never a pinned one of its own), and runs with
the versions in ``SUPPORTED_TRITON`` (tested: ``TESTED_TRITON``). With another, ``auto`` logs one warning
and runs dense; ``fused`` raises naming the flag.

What depends only on the configuration is resolved once: :class:`StaticDispatch` holds it for one
``impl``, dot product or not, device, dtype and head dim (``impl`` checked, why the kernel can never run
there, the dispatch table's entries for them, read at resolution), and the attention module keeps one
per device, dtype and head dim its calls bring (so ``.to()``, ``.half()`` and copies resolve anew). Its
:meth:`StaticDispatch.backend` decides each call from what varies per call, and :func:`attention_backend`
does both for one call. One decision per configuration: the :class:`FusedBackend` of the call's
configuration (:func:`call_config`: device, dtype, head dim, which tables, padding, dropout, TF32, whether
a backward runs and which tables get gradients), or ``None`` for the dense path; the module then calls
``backend.run(...)``. The backends, kept in ``_BACKENDS`` (the only record of decisions), hold:

Self-check (:mod:`.self_check`): run by the first call of each configuration, a small forward (and
backward, where the configuration has one) against the reference, in the caller's layout and scale, at
two lengths. In ``auto`` a mismatch or an exception logs one warning with the measured error, and that
configuration runs dense for the rest of the process.

First launch of each specialisation: Triton compiles a separate kernel per launch signature (a length
or stride divisible by 16 or equal to 1, 16-byte-aligned pointers, 64-bit integers, and the constexprs
the call's sizes select, such as the forward's far share), and a compile can fail on one where it
passed on another (e.g. out of shared memory on a GPU with less of it). The first call of each new
signature (:func:`launch_key`) runs the kernel on the call's own inputs first, as the call will (forward,
and backward where grad mode and the inputs want one); an exception or a non-finite output makes
``auto`` warn once and compute that signature densely for the rest of the process, and ``fused`` raise.
(A kernel that corrupts memory can poison the CUDA context before any check sees it; the guard-memory
tests in ``tests/kernels`` are there for that.)

A bias of the query and key positions ``(i, j)`` (FIRE), not of ``i - j`` alone, has no table by distance:
such calls run dense under ``auto`` and ``dense``, and ``fused`` and ``flex`` refuse them naming the flag
(:func:`pair_bias_path`).

Calls the kernel does not compute go to the dense path in every mode: incremental decoding, returning
attention weights, and any mask other than fairseq's causal future mask (e.g. full-context alignment);
flex also leaves key padding and dot-product-free attention to the dense path. Every choice is logged
once per distinct line (``attention path: ...``).
Imports only torch; triton is imported the first time the kernel is used.
"""

import logging
import os
import re
from collections import OrderedDict
from typing import Dict, NamedTuple, Optional, Tuple

import torch

from . import dispatch_table, dropout_rate
from .self_check import KernelConfig, kernel_error

logger = logging.getLogger(__name__)

IMPLS = ("auto", "dense", "fused", "flex")
FLAG = "--urpe-attention-impl"
_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Triton versions the kernel runs with: (major, minor) from SUPPORTED_TRITON[0] up to, not including,
# SUPPORTED_TRITON[1]. 3.7.1 is what torch 2.13.0's CUDA build pins; 3.9.0 the newest released.
SUPPORTED_TRITON = ((3, 7), (3, 10))
TESTED_TRITON = ("3.7.1", "3.9.0")

# The fused kernel's backends of this process, one per (impl, configuration): the self-check's verdict and
# the first launches of each launch signature (FusedBackend). The only record of decisions.
_BACKENDS: Dict[Tuple[str, KernelConfig], "FusedBackend"] = {}
# Lines this process has logged (log_once): each is said once.
_LOGGED = set()


def log_once(line: str, level: int = logging.INFO) -> None:
    """``line`` at ``level``, the first time this process says it."""
    if line not in _LOGGED:
        _LOGGED.add(line)
        logger.log(level, line)


def log_path(fused, why: str) -> bool:
    """Log ``attention path: fused (<configuration>)`` or ``attention path: dense (<why>)`` once per process
    for each distinct line (INFO, so a fairseq run's log names the path its attention took); ``fused`` may
    also name the path (``"flex"``). Returns ``fused``."""
    name = fused if isinstance(fused, str) else ("fused" if fused else "dense")
    log_once(f"attention path: {name} ({why})")
    return fused


def call_config(x: torch.Tensor, dropout_p: float, tables=(None, None), padding: bool = False) -> KernelConfig:
    """The configuration of a call (:class:`KernelConfig`): ``x`` its ``v`` ``(B, H, T, d)``; ``tables`` its
    ``(bias_table, c_table)`` (or ``None``); whether a backward will run (grad mode on and an input needing
    gradients) and which tables get gradients, as torch's state says now."""
    bias, c = tables
    backward = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, bias, c))
    tf32 = x.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32  # the kernel reads the flag per call
    return KernelConfig(str(x.device), x.dtype, x.size(-1), bias is not None, c is not None, bool(padding),
                        dropout_p > 0, tf32, backward, backward and bias is not None and bias.requires_grad,
                        backward and c is not None and c.requires_grad,
                        backward and torch.are_deterministic_algorithms_enabled())


def attention_backend(
    impl: str,
    x: torch.Tensor,
    attn_mask: Optional[torch.Tensor],
    incremental: bool,
    need_weights: bool,
    dropout_p: float,
    dot_product: bool = True,
    tables=(None, None),
    padding: bool = False,
) -> Optional["FusedBackend"]:
    """The fused backend that computes this self-attention call (``backend.run(...)``), or ``None`` where
    the dense path does. ``x`` is its ``v`` ``(B, H, T, d)`` (device, dtype, shape, ``requires_grad``
    read); ``dropout_p``: the attention dropout this call applies (0 when inactive); ``tables``: the
    ``(bias_table, c_table)`` the kernel would read (``None`` where absent); ``padding``: whether there is
    a key padding mask. Resolves the configuration's :class:`StaticDispatch` afresh, then decides the call;
    the attention module keeps its :class:`StaticDispatch` instead (one per device, dtype and head dim).

    Raises ``RuntimeError`` naming the flag when ``impl == "fused"`` and the kernel cannot run here or
    failed its self-check.
    """
    return StaticDispatch(impl, x.device, x.dtype, x.size(-1), dot_product).backend(
        x, attn_mask, incremental, need_weights, dropout_p, tables, padding)


class StaticDispatch:
    """The part of the decision that depends only on the configuration (``impl``, ``dot_product``) and the
    call's device, dtype and head dim, resolved once: ``impl`` checked, why the fused kernel can never run
    here (:class:`FusedStatic`), and what the measured dispatch table (:mod:`.dispatch_table`, read at
    resolution) holds for this device, dtype and head dim. :meth:`backend` then decides each call from what
    varies per call: incremental decoding, the weights asked for, the mask, padding, dropout, grad mode,
    the tables' lengths, batch x heads, and torch's deterministic and TF32 switches.

    ``key``: ``(impl, dot_product, device, dtype, head_dim)``, what it was resolved for."""

    def __init__(self, impl: str, device: torch.device, dtype: torch.dtype, head_dim: int, dot_product: bool = True):
        if impl not in IMPLS:
            raise ValueError(f"{FLAG} must be one of {', '.join(IMPLS)}; got {impl!r}")
        self.key = (impl, dot_product, device, dtype, head_dim)
        self.impl, self.dot_product = impl, dot_product
        self.fused = None if impl == "dense" else FusedStatic.of(device, dtype, head_dim, dot_product,
                                                                 forced=impl == "fused")
        self.measured: Dict[Tuple[str, bool], Tuple[str, dispatch_table.TableKey]] = {}
        if impl == "auto":  # {(kind, dropout): (path, key)} of this device, dtype and head dim
            prefix = dispatch_table.table_key_prefix(device, dtype, head_dim)
            self.measured = {(key.kind, key.dropout): (path, key) for key, path in
                             dispatch_table.read_table(dispatch_table.table_path()).items() if key[:3] == prefix}

    def backend(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor], incremental: bool, need_weights: bool,
                dropout_p: float, tables=(None, None), padding: bool = False) -> Optional["FusedBackend"]:
        """:func:`attention_backend` of a call whose ``x`` has this dispatch's device, dtype and head dim."""
        impl, dot_product = self.impl, self.dot_product
        if impl == "dense":
            return _dense(f"{FLAG} dense")
        if incremental:
            return _dense("incremental decoding, which always runs dense")
        if need_weights:
            return _dense("the attention weights are asked for")
        if impl == "flex":
            reason = why_not_flex(x, attn_mask, dropout_p, dot_product, tables, padding)
            if reason is not None:
                return _dense(reason)
            return flex_backend(f"{FLAG} flex", x, tables)
        if impl == "auto" and self.measured:
            measured = self.measured.get((dispatch_table.table_kind(*tables, x.size(2)), dropout_p > 0))
            if measured is not None:
                path, key = measured
                if path == "dense":
                    return _dense(f"the dispatch table measured dense fastest for {describe_key(key)}")
                if path == "flex":
                    reason = why_not_flex(x, attn_mask, dropout_p, dot_product, tables, padding, forced=False)
                    if reason is None:
                        return flex_backend(f"the dispatch table measured flex fastest for {describe_key(key)}", x,
                                            tables)
                    log_once(f"the dispatch table names flex for {describe_key(key)}, but this call cannot run it "
                             f"({reason}): the built-in order decides")
        reason = _why_not_fused(x, dropout_p, dot_product, forced=impl == "fused", static=self.fused)
        if reason is not None and impl == "auto":
            if reason.startswith("triton "):  # a triton that is there but not one the kernel runs with: say so, once
                log_once(f"fused attention is off: {reason}; the dense attention runs instead ({FLAG} dense silences "
                         f"this).", logging.WARNING)
            return _dense(reason)
        if not is_future_mask(attn_mask, x.size(2)):
            return _dense("a mask other than fairseq's causal future mask")
        if reason is not None:
            raise RuntimeError(f"{FLAG} fused cannot run here: {reason}. Use {FLAG} auto (or dense).")
        config = call_config(x, dropout_p, tables, padding)
        backend = fused_backend(impl, config)
        if backend is None:
            return _dense(f"the fused kernel failed its self-check on {config.describe()}")
        if dropout_p > 0:  # the rate the kernel runs, once per rate (dropout_rate)
            log_once(f"fused attention: {dropout_rate.describe(dropout_p)}")
        log_path(True, config.describe())
        return backend


PAIR_BIAS = ("the position bias is a function of the query and key positions (i, j), not of i - j alone "
             "(FIRE), and the fused kernel and the flex path read the bias as a table by distance")


def pair_bias_refusal(impl: str) -> Optional[str]:
    """What ``impl`` says to a bias of ``(i, j)``: an error naming the flag (``fused``, ``flex``), else ``None``."""
    if impl in ("fused", "flex"):
        return f"{FLAG} {impl}: {PAIR_BIAS}. Use {FLAG} auto or dense (both run it densely)."
    return None


def pair_bias_path(impl: str) -> None:
    """The path of a call with a bias of ``(i, j)``: the dense one, logged; ``RuntimeError`` naming the flag
    under ``fused`` and ``flex``, which cannot take it."""
    if impl not in IMPLS:
        raise ValueError(f"{FLAG} must be one of {', '.join(IMPLS)}; got {impl!r}")
    refusal = pair_bias_refusal(impl)
    if refusal is not None:
        raise RuntimeError(refusal)
    _dense(PAIR_BIAS if impl == "auto" else f"{FLAG} dense")


def _dense(why: str) -> None:
    log_path(False, why)
    return None


def describe_key(key) -> str:
    return (f"{key.device}, {key.dtype}, head dim {key.head_dim}, {key.kind}"
            f"{', attention dropout' if key.dropout else ''} ({dispatch_table.table_path()})")


def why_not_flex(x: torch.Tensor, attn_mask, dropout_p: float, dot_product: bool, tables, padding: bool,
                 forced: bool = True) -> Optional[str]:
    """Why this call does not run through flex: ``RuntimeError`` naming the flag for what ``flex`` refuses
    (``forced``), the reason as a string for a call it leaves to the dense path (or, unforced, for both)."""
    refusal = flex_refusal(x, dropout_p, tables)
    if refusal is not None:
        if forced:
            raise RuntimeError(f"{FLAG} flex: {refusal}. Use {FLAG} auto, fused or dense.")
        return refusal
    if not dot_product:
        return "dot-product-free attention (scores from positions only) runs dense"
    if not is_future_mask(attn_mask, x.size(2)):
        return "a mask other than fairseq's causal future mask"
    if padding:
        return "a key padding mask, which the flex path does not take"
    return None


def flex_refusal(x: torch.Tensor, dropout_p: float, tables) -> Optional[str]:
    """What ``flex`` refuses outright for this call (``None``: nothing)."""
    backward = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, *tables))
    if dropout_p > 0:
        return (f"flex_attention has no attention dropout, and this call applies it at p = {dropout_p:g} "
                f"(set --attention-dropout 0 to use flex)")
    if x.device.type not in ("cuda", "cpu"):
        return f"tensors are on {x.device.type}; flex runs on CUDA (and forward-only on CPU)"
    if x.device.type == "cpu" and backward:
        return "training on CPU: flex_attention has no backward on CPU"
    if x.device.type == "cpu" and tables[1] is not None:
        return "URPE's C on CPU: compiled flex_attention on CPU does not return the log-sum-exp URPE's forms need"
    if torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled():
        return "torch.use_deterministic_algorithms(True) is on, and flex adds the tables' gradients by atomics"
    return None


_FLEX: Dict[str, "FlexBackend"] = {}  # one per process: its engine keeps the compiled shapes and block masks


def flex_backend(why: str, x: torch.Tensor, tables) -> "FlexBackend":
    log_path("flex", f"{why}; {dispatch_table.table_kind(*tables, x.size(2))} tables")
    if "flex" not in _FLEX:
        _FLEX["flex"] = FlexBackend()
    return _FLEX["flex"]


class FlexBackend:
    """Calls through :class:`~.flex_attention.FlexEngine` (compiled), with the fused backend's ``run``."""

    def __init__(self):
        from .flex_attention import FlexEngine

        self.engine = FlexEngine(compiled=True)

    def run(self, q, k, v, bias_table=None, c_table=None, key_padding_mask=None,
            dropout_p=0.0) -> Optional[torch.Tensor]:
        """``softmax(Q K^T + B) ⊙ C) V`` causal, as :meth:`FusedBackend.run`; ``None`` (the caller runs dense,
        logged here) where the call's compiled shape would pass torch's recompile limit."""
        if not self.engine.admits(q, bias_table, c_table):
            log_once(f"flex attention: a new shape ({describe_launch(q, key_padding_mask, dropout_p)}) would pass "
                     f"torch's recompile limit of {self.engine.shape_limit} compiled shapes; calls like it run the "
                     f"dense attention (pad batches to fewer shapes, or raise "
                     f"torch._dynamo.config.recompile_limit)", logging.WARNING)
            return None
        return self.engine(q, k, v, bias_table, c_table)


def fused_backend(impl: str, config: KernelConfig) -> Optional["FusedBackend"]:
    """The fused backend of ``config``, whose self-check runs the first time (see the module doc); ``None``
    where it failed (``auto``, which warns once), ``RuntimeError`` naming the flag (``fused``)."""
    if (impl, config) not in _BACKENDS:
        _BACKENDS[impl, config] = FusedBackend(impl, config, kernel_error(config))
    backend = _BACKENDS[impl, config]
    if backend.self_check_error is None:
        return backend
    if impl == "fused":
        raise RuntimeError(f"{FLAG} fused: the fused kernel failed its self-check on {config.describe()}: "
                           f"{backend.self_check_error}. Use {FLAG} auto (which falls back to the dense attention) "
                           f"or dense.")
    return None


class FusedBackend:
    """The fused kernel in one configuration (:class:`KernelConfig`) under one ``impl``: its self-check's
    verdict, and the verdict of the first launch of each launch signature (:func:`launch_key`)."""

    def __init__(self, impl: str, config: KernelConfig, self_check_error: Optional[str]):
        self.impl, self.config, self.self_check_error = impl, config, self_check_error
        self.launches: Dict[tuple, Optional[str]] = {}  # launch_key -> None where it ran, else what went wrong
        if self_check_error is not None and impl == "auto":
            logger.warning(
                f"fused attention failed its self-check on {config.describe()}: {self_check_error}. This "
                f"configuration uses the dense attention for the rest of the process ({FLAG} dense silences this "
                f"check; please report it with your GPU, torch and triton versions)."
            )

    def run(self, q, k, v, bias_table=None, c_table=None, key_padding_mask=None,
            dropout_p=0.0) -> Optional[torch.Tensor]:
        """Causal ``dropout(softmax(Q K^T + B) ⊙ C) V`` by the fused kernel; ``q`` (B, H, T, d) already
        scaled (and q, k already rotated, for RoPE); ``bias_table``, ``c_table``: ``(H, n)`` values at
        causal distances ``0, 1, ...``, the last for every distance past it (or ``None``). The dropout mask
        comes from torch's generator on q's device (``--seed`` makes it reproducible).

        The first call of each launch signature runs the kernel on these inputs first, as this call will
        (forward, and backward where one will run): where that fails, ``auto`` warns once and returns
        ``None`` (the caller computes the dense attention), and ``fused`` raises naming the flag.
        """
        from . import fused_urpe_attention as kernel  # imports triton

        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.to(torch.bool)
        inputs = (q, k, v, bias_table, c_table, key_padding_mask)
        key = launch_key(*inputs, dropout_p=dropout_p)
        if key not in self.launches:
            self.launches[key] = first_launch_error(kernel.fused_causal_urpe_attention, *inputs, dropout_p=dropout_p)
        error = self.launches[key]
        if error is not None:
            what = (f"the fused kernel failed at its first launch for "
                    f"{describe_launch(q, key_padding_mask, dropout_p)}: {error}")
            if self.impl == "fused":
                raise RuntimeError(f"{FLAG} fused: {what}. Use {FLAG} auto (which falls back to the dense attention) "
                                   f"or dense.")
            log_once(f"{what}. Calls like it use the dense attention for the rest of the process ({FLAG} dense "
                     f"silences this; please report it with your GPU, torch and triton versions).", logging.WARNING)
            return None
        return kernel.fused_causal_urpe_attention(*inputs, scale=1.0, dropout_p=dropout_p)


class FusedStatic(NamedTuple):
    """Why the fused kernel cannot run, as far as the configuration, device, dtype and head dim tell (each
    ``None`` where that part allows it); :func:`_why_not_fused` adds what each call tells, in its order."""

    dot_product: Optional[str]
    head_dim: Optional[str]
    interpreted: bool
    device: Optional[str]
    dtype: Optional[str]
    triton: Optional[str]
    float32: bool

    @classmethod
    def of(cls, device: torch.device, dtype: torch.dtype, head_dim: int, dot_product: bool,
           forced: bool) -> "FusedStatic":
        interpreted = device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
        device_reason = dtype_reason = triton_reason = None
        if device.type != "cuda" and not (forced and interpreted):
            device_reason = (f"tensors are on {device.type}; the kernel needs CUDA (or TRITON_INTERPRET=1 on CPU, "
                             f"for tests)")
        elif dtype not in _FUSED_DTYPES and not interpreted:
            dtype_reason = f"{dtype} is not float16, bfloat16 or float32"
        elif not triton_available():
            triton_reason = "triton is not installed (it comes with torch's CUDA builds on Linux)"
        else:
            triton_reason = triton_version_problem(triton_version())
        return cls(
            None if dot_product else "dot-product-free attention (scores from positions only) has no fused kernel",
            f"head dim {head_dim} exceeds the kernel's 128" if head_dim > 128 else None,
            interpreted, device_reason, dtype_reason, triton_reason, dtype == torch.float32)


def _why_not_fused(x: torch.Tensor, dropout_p: float, dot_product: bool, forced: bool,
                   static: Optional[FusedStatic] = None) -> Optional[str]:
    """Why the fused kernel does not run this call (``None``: it may); ``static``: the configuration's part,
    resolved before (:class:`FusedStatic`), else resolved here."""
    if static is None:
        static = FusedStatic.of(x.device, x.dtype, x.size(-1), dot_product, forced)
    if static.dot_product is not None:
        return static.dot_product
    if static.head_dim is not None:
        return static.head_dim
    if x.size(0) * x.size(1) > 65535:
        return f"batch x heads = {x.size(0) * x.size(1)} exceeds the kernel grid's 65535"
    problem = dropout_rate.rate_problem(dropout_p)
    if problem is not None:
        return problem + ("; the dense attention runs it at the rate asked" if not forced else "")
    if static.float32 and not forced and not torch.backends.cuda.matmul.allow_tf32:
        # Full-precision products run without tensor cores: slower than the dense path's matmuls.
        return "float32 without TF32 (torch.backends.cuda.matmul.allow_tf32 is off)"
    return static.device or static.dtype or static.triton


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def triton_version() -> str:
    import triton

    return triton.__version__


def triton_version_problem(version: str) -> Optional[str]:
    """Why the kernel does not run with triton ``version`` (``None`` where it does)."""
    match = re.match(r"(\d+)\.(\d+)", version)
    (low, high) = SUPPORTED_TRITON
    if match and low <= (int(match.group(1)), int(match.group(2))) < high:
        return None
    return (f"triton {version} is not a version the fused kernel supports ({low[0]}.{low[1]} <= triton < "
            f"{high[0]}.{high[1]}; tested: {', '.join(TESTED_TRITON)}; it uses the triton that comes with torch)")


# Future masks already checked, keyed by what identifies their contents: memory, version counter (bumped
# by in-place writes), shape, strides, dtype. Each entry holds its tensor, so its memory cannot be freed
# and reused by another mask while the entry exists. fairseq's decoder slices one cached buffer, so each
# length is checked (one device sync) once.
_FUTURE_MASKS: "OrderedDict[tuple, torch.Tensor]" = OrderedDict()
_FUTURE_MASKS_KEPT = 8


def is_future_mask(attn_mask: Optional[torch.Tensor], length: int) -> bool:
    """Whether ``attn_mask`` is exactly fairseq's causal mask for ``length``: 0 on and below the diagonal, -inf above."""
    if attn_mask is None or tuple(attn_mask.shape) != (length, length) or not attn_mask.is_floating_point():
        return False
    try:
        key = (attn_mask.data_ptr(), attn_mask._version, length, attn_mask.stride(), attn_mask.dtype, attn_mask.device)
    except RuntimeError:  # inference-mode tensors have no version counter
        key = None
    if key is not None and key in _FUTURE_MASKS:
        _FUTURE_MASKS.move_to_end(key)
        return True
    future = torch.ones(length, length, dtype=torch.bool, device=attn_mask.device).triu(1)
    causal = bool(torch.equal(attn_mask.isneginf(), future) and not attn_mask.masked_fill(future, 0).any())
    if causal and key is not None:
        _FUTURE_MASKS[key] = attn_mask
        while len(_FUTURE_MASKS) > _FUTURE_MASKS_KEPT:
            _FUTURE_MASKS.popitem(last=False)
    return causal


def _specialisation(value: int) -> Tuple[bool, bool, bool]:
    """What Triton specialises an integer argument on: equal to 1, divisible by 16, 64-bit."""
    return value == 1, value % 16 == 0, not -2**31 <= value < 2**31


def launch_key(q, k, v, bias_table=None, c_table=None, key_padding_mask=None, dropout_p=0.0) -> tuple:
    """What selects the compiled kernels of a call: its configuration (:func:`call_config`, grad mode and
    the tables' gradients included), every integer argument's and pointer's specialisation (the
    backward's upstream gradient is assumed laid out like the output), and the constexprs the kernel
    picks from the call's sizes (``launch_variant``: the forward's far share and the backward's far tiles)."""
    from .fused_urpe_attention import launch_variant  # imports triton

    config = call_config(q, dropout_p, (bias_table, c_table), key_padding_mask is not None)
    integers = [q.size(1), q.size(2), q.size(0) * q.size(1), *q.stride(), *k.stride(), *v.stride()]
    last = [min(t.size(1), q.size(2)) - 1 for t in (bias_table, c_table) if t is not None]
    integers += last + [max(last) if last else q.size(2)]  # LAST_B, LAST_C, FAR (the kernel's table_reach)
    pointers = [x.data_ptr() % 16 == 0 for x in (q, k, v)]
    variant = launch_variant(q, bias_table, c_table, key_padding_mask, config.bias_grad or config.c_grad,
                             deterministic=config.deterministic)
    return config, tuple(map(_specialisation, integers)), tuple(pointers), variant


def describe_launch(q, key_padding_mask, dropout_p) -> str:
    batch, heads, length, head_dim = q.shape
    return (f"{q.device}, {str(q.dtype).replace('torch.', '')}, B={batch}, H={heads}, T={length}, head dim {head_dim}, "
            f"strides {tuple(q.stride())}{', padding' if key_padding_mask is not None else ''}"
            f"{', attention dropout' if dropout_p > 0 else ''}")


def first_launch_error(kernel, q, k, v, bias_table=None, c_table=None, key_padding_mask=None, dropout_p=0.0):
    """``None`` where ``kernel`` runs on these inputs (their own layout and sizes, detached) as the call
    will, with finite results: forward, and backward to the inputs that need gradients where grad mode is
    on (so a call under ``no_grad`` or with frozen tables checks the variant it runs); else what went
    wrong. Leaves torch's random state as it was."""
    seed = torch.zeros(1, dtype=torch.int64, device=q.device) if dropout_p > 0 else None
    inputs = (q, k, v, bias_table, c_table)
    backward = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs)
    try:
        with torch.inference_mode(False), torch.set_grad_enabled(backward):
            # inference-mode tensors cannot enter autograd: those are copied (with their strides)
            leaves = [None if x is None else (x.detach().clone() if x.is_inference() else x.detach())
                      .requires_grad_(backward and x.requires_grad) for x in inputs]
            out = kernel(*leaves, key_padding_mask, scale=1.0, dropout_p=dropout_p, dropout_seed=seed)
            wanted = [x for x in leaves if x is not None and x.requires_grad]
            grads = torch.autograd.grad(out, wanted, torch.ones_like(out)) if wanted else ()
    except Exception as error:  # compile error, out of resources, grid limits, ...
        return f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
    if not all(bool(torch.isfinite(x).all()) for x in (out, *grads)):
        return "non-finite output or gradient"
    return None
