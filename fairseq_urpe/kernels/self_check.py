"""The fused kernel checks itself on first use: a small forward+backward against the plain reference.

One check per configuration the kernel is compiled for (:class:`KernelConfig`: device, dtype, head dim,
which tables, padding, dropout, TF32 for float32, whether a backward runs and which tables get gradients:
a call under ``no_grad`` runs the forward alone, and without table gradients the forward stores no far
share, each a variant of its own, checked as it runs), on inputs of that configuration laid out as the
attention module passes them: ``B = 2, H = 2``, q, k, v and the upstream gradient views of ``(T, B, H d)``
tensors (fairseq's layout, permuted to ``(B, H, T, d)``), q scaled by ``1 / sqrt(d)`` beforehand and the
kernel's scale 1, tables of ``T // 4`` and ``T // 5`` entries (so that far and near tiles both run); at two
lengths (:func:`check_lengths`): a multiple of 128 (Triton compiles lengths divisible by 16 separately)
and an odd one spanning several tiles (64 and 45 under the interpreter). The output and every gradient
the configuration computes (q, k, v, the tables) against :func:`~fairseq_urpe.kernels.reference.causal_urpe_attention_reference` computed in at least
float32 from the same inputs (and, with dropout, the kernel's own mask). Error: ``max |fused - ref| /
max |ref|`` per tensor (:func:`relative_error`); the report names every tensor over the tolerance and the
largest error. Milliseconds on a GPU; it does not touch torch's random generators.

Imports only torch (triton through the kernel module, on the first check).
"""

import math
from typing import NamedTuple, Optional

import torch

# Largest accepted error per dtype ("tf32": float32 with TF32 products). Half precision rounds P to 8 (11)
# significant bits before P V; a kernel that is wrong (a miscompile, a tile or table read out of place)
# is off by O(1).
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, "tf32": 1e-2, torch.float16: 1e-2, torch.bfloat16: 5e-2}
CHECK_DROPOUT = 0.1


class KernelConfig(NamedTuple):
    """What selects a compiled variant of the kernels."""

    device: str
    dtype: torch.dtype
    head_dim: int
    bias: bool
    toeplitz: bool
    padding: bool
    dropout: bool
    tf32: bool = False  # float32 with TF32 products (torch.backends.cuda.matmul.allow_tf32): another variant
    backward: bool = True  # a backward runs (grad mode on, an input needing gradients)
    bias_grad: bool = True  # the bias table gets a gradient (False: frozen, or no backward, or no bias)
    c_grad: bool = True  # the Toeplitz table gets a gradient: with bias_grad, the forward's far share
    deterministic: bool = False  # a backward without atomics (torch.use_deterministic_algorithms): another variant

    def describe(self) -> str:
        tables = " + ".join(name for name, on in (("bias", self.bias), ("Toeplitz C", self.toeplitz)) if on) or "no tables"
        frozen = [name for name, on, grad in (("bias", self.bias, self.bias_grad), ("Toeplitz C", self.toeplitz,
                                                                                     self.c_grad)) if on and not grad]
        extras = "".join([", padding" if self.padding else "", ", attention dropout" if self.dropout else "",
                          ", TF32" if self.tf32 else "", "" if self.backward else ", no backward",
                          f", frozen {' + '.join(frozen)}" if frozen and self.backward else "",
                          ", deterministic" if self.deterministic and self.backward else ""])
        return f"{self.device}, {str(self.dtype).replace('torch.', '')}, head dim {self.head_dim}, {tables}{extras}"


def check_lengths(device: torch.device):
    """A multiple of 128 and an odd length past two of the largest tiles on a GPU; under the interpreter
    (tiles of 16 and 32, no specialisations) 64 and an odd length past one tile."""
    return (64, 32 + 13) if device.type == "cpu" else (2 * 128, 2 * 128 + 45)


def tolerance(config: KernelConfig) -> float:
    """The largest accepted error in ``config`` (float32 on a GPU: TF32 where torch allows it now)."""
    if config.dtype == torch.float32 and config.device.startswith("cuda") and torch.backends.cuda.matmul.allow_tf32:
        return TOLERANCE["tf32"]
    return TOLERANCE[config.dtype]


def kernel_error(config: KernelConfig) -> Optional[str]:
    """``None`` where the kernel matches the reference in this configuration; else what went wrong
    (the tensors over the tolerance and the largest error, or the exception the kernel raised)."""
    try:
        errors = {length: kernel_errors(config, length) for length in check_lengths(torch.device(config.device))}
    except Exception as error:  # compile error, out of resources, grid limits, ...
        return f"the kernel raised {type(error).__name__}: {' '.join(str(error).split())[:300]}"
    accepted = tolerance(config)
    worst_length, errors = max(errors.items(), key=lambda item: _worst(item[1], accepted))
    wrong = [name for name, err in errors.items() if not err <= accepted]  # NaN is wrong
    if not wrong:
        return None
    worst = max(wrong, key=lambda name: errors[name] if errors[name] == errors[name] else float("inf"))
    return (f"{', '.join(wrong)} differ{'s' if len(wrong) == 1 else ''} from the reference at T = {worst_length}: max "
            f"error / max value = {errors[worst]:.3g} in the {worst.replace('gradient of the ', 'gradient of ')} "
            f"(accepted: {accepted:g})")


def _worst(errors: dict, accepted: float):
    """Order of badness of one length's errors: how many are over the tolerance (NaN counts), then the largest."""
    over = [e for e in errors.values() if not e <= accepted]
    return len(over), max((e if e == e else float("inf")) for e in errors.values())


def kernel_errors(config: KernelConfig, length: Optional[int] = None, batch: int = 2, heads: int = 2):
    """``{tensor: max |fused - ref| / max |ref|}`` for the output and every gradient, on the check's
    inputs (``length`` default: the first of :func:`check_lengths`); exceptions of the kernel propagate."""
    # Whatever the caller runs under (no_grad, inference_mode, autocast), the check sets its own grad mode.
    with torch.inference_mode(False):
        return _kernel_errors(config, length, batch, heads)


def _kernel_errors(config: KernelConfig, length: Optional[int], batch: int, heads: int):
    from . import fused_urpe_attention as kernel  # imports triton
    from .reference import causal_urpe_attention_reference

    device = torch.device(config.device)
    length = check_lengths(device)[0] if length is None else length
    cpu = torch.Generator().manual_seed(20240521)  # private: the caller's random streams stay as they were
    d = config.head_dim

    def randn(*shape):
        return torch.randn(*shape, generator=cpu, dtype=torch.float64)

    def caller_layout(x):
        """(T, B, H d) -> the (B, H, T, d) view the attention module passes (strides (H d, d, B H d, 1))."""
        return x.to(device, config.dtype).view(length, batch, heads, d).permute(1, 2, 0, 3)

    # q as the module scales it (by 1 / sqrt(d), before the kernel, which then scales by 1); gradients where
    # the configuration's call wants them (no backward: the forward alone; frozen tables: none for them)
    backward = config.backward
    q = caller_layout(randn(length, batch, heads * d) / math.sqrt(d)).detach().requires_grad_(backward)
    k, v = (caller_layout(randn(length, batch, heads * d)).detach().requires_grad_(backward) for _ in range(2))
    wide = torch.promote_types(config.dtype, torch.float32)  # the tables' and the reference's dtype
    # tables shorter than T, as the module passes T5's and clipped ones: far tiles (past both tables' ends)
    # and near ones reading each table's last entry past its end, at different distances for b and c
    bias = c = None
    if config.bias:
        bias = randn(heads, max(1, length // 4)).to(device, wide).requires_grad_(backward and config.bias_grad)
    if config.toeplitz:
        c = (randn(heads, max(1, length // 5)).abs() + 0.5).to(device, wide).requires_grad_(backward and config.c_grad)
    pad = None
    if config.padding:
        pad = torch.zeros(batch, length, dtype=torch.bool)
        pad[0, length - min(7, length - 1):] = True  # right padding
        pad[-1, :min(3, length)] = True  # left padding: the first queries see only pads
        pad = pad.to(device)
    upstream = caller_layout(randn(length, batch, heads * d))
    scale = 1.0
    leaves = [("q", q), ("k", k), ("v", v), ("bias table", bias), ("Toeplitz table", c)]
    leaves = [(name, x) for name, x in leaves if x is not None and x.requires_grad]
    with torch.set_grad_enabled(backward), torch.autocast(device.type, enabled=False):
        seed, mask = None, None
        if config.dropout:
            seed = torch.tensor([20240521], dtype=torch.int64, device=device)
            mask = kernel.attention_dropout_mask(seed, batch, heads, length, CHECK_DROPOUT)
        out = kernel.fused_causal_urpe_attention(q, k, v, bias, c, pad, scale, CHECK_DROPOUT if config.dropout else 0.0,
                                                 seed, deterministic=config.deterministic)
        got = (out,) + (torch.autograd.grad(out, [x for _, x in leaves], upstream) if leaves else ())
        named = {name: x.detach().to(wide).requires_grad_() for name, x in leaves}
        plain = {"q": q, "k": k, "v": v, "bias table": bias, "Toeplitz table": c}
        ref = {name: named.get(name, None if x is None else x.detach().to(wide)) for name, x in plain.items()}
        want = causal_urpe_attention_reference(
            ref["q"], ref["k"], ref["v"], ref["bias table"], ref["Toeplitz table"], pad, scale, mask)
        expected = (want,) + (torch.autograd.grad(want, list(named.values()), upstream.to(wide)) if leaves else ())
    names = ["output"] + [f"gradient of the {name}" for name, _ in leaves]
    return {name: relative_error(a, b) for name, a, b in zip(names, got, expected)}


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """``max |got - want| / max |want|``, the denominator at least 1: the inputs and the upstream gradient
    are standard normal, so what is compared is of order 1 or more, except a gradient that is 0 in exact
    arithmetic (q's with a single visible key), which comes out at rounding level."""
    want = want.float() if want.dtype not in (torch.float32, torch.float64) else want
    return ((got.to(want.dtype) - want).abs().max() / want.abs().max().clamp(min=1.0)).item()
