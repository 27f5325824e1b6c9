"""Which attention computes a call: the fused Triton kernel or the dense PyTorch path.

``--urpe-attention-impl`` (``impl`` here):
  - ``dense``: always the dense path.
  - ``auto`` (default): the fused kernel where it can run (a CUDA tensor, Triton importable, float16 or
    bfloat16, or float32 where torch allows TF32 matmuls, head dim <= 128, dot-product scores), the call
    is one it computes, and the kernel passed its self-check in this configuration; the dense path
    otherwise.
  - ``fused``: the fused kernel for every call it computes (float32 included, TF32 or not); an error
    naming the flag where this machine or configuration cannot run it or the self-check failed (on CPU
    it runs under Triton's interpreter when ``TRITON_INTERPRET=1``, slowly: that is how the tests run it).

Self-check (:mod:`.self_check`): the first call in each configuration (device, dtype, head dim, which
tables, padding, dropout, TF32) runs a small forward+backward against the reference. In ``auto`` a mismatch or
an exception logs one warning with the measured error, and that configuration runs dense for the rest of
the process. (A kernel that corrupts memory can poison the CUDA context before any check sees it; the
guard-memory tests in ``tests/kernels`` are there for that.)

Calls the kernel does not compute go to the dense path in every mode: incremental decoding, returning
attention weights, and any mask other than fairseq's causal future mask (e.g. full-context alignment).
Imports only torch; triton is imported the first time the kernel is used.
"""

import logging
import os
from collections import OrderedDict
from typing import Dict, Optional

import torch

from .self_check import KernelConfig, kernel_error

logger = logging.getLogger(__name__)

IMPLS = ("auto", "dense", "fused")
FLAG = "--urpe-attention-impl"
_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_DROPOUT_LENGTH = 131064  # as the kernel's (fused_urpe_attention imports triton)

# Self-check verdicts of this process: None where the kernel passed, else what went wrong.
_SELF_CHECKS: Dict[KernelConfig, Optional[str]] = {}


def use_fused_attention(
    impl: str,
    x: torch.Tensor,
    attn_mask: Optional[torch.Tensor],
    incremental: bool,
    need_weights: bool,
    dropout_p: float,
    dot_product: bool = True,
    tables=(True, True),
    padding: bool = False,
) -> bool:
    """True where the fused kernel computes this self-attention call; ``x`` is its ``v`` (or ``q``, ``k``),
    ``(B, H, T, d)``: only its device, dtype and shape are read. ``dropout_p``: the attention dropout
    this call applies (0 when inactive); ``tables``: whether there is a position bias and a Toeplitz
    reweighting; ``padding``: whether there is a key padding mask.

    Raises ``RuntimeError`` naming the flag when ``impl == "fused"`` and the kernel cannot run here or
    failed its self-check.
    """
    if impl not in IMPLS:
        raise ValueError(f"{FLAG} must be one of {', '.join(IMPLS)}; got {impl!r}")
    if impl == "dense" or incremental or need_weights:
        return False
    reason = _why_not_fused(x, dropout_p, dot_product, forced=impl == "fused")
    if reason is not None and impl == "auto":
        return False
    if not is_future_mask(attn_mask, x.size(2)):
        return False
    if reason is not None:
        raise RuntimeError(f"{FLAG} fused cannot run here: {reason}. Use {FLAG} auto (or dense).")
    tf32 = x.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32  # the kernel reads the flag per call
    config = KernelConfig(str(x.device), x.dtype, x.size(-1), bool(tables[0]), bool(tables[1]), bool(padding),
                          dropout_p > 0, tf32)
    return self_check_passed(impl, config)


def self_check_passed(impl: str, config: KernelConfig) -> bool:
    """Whether the kernel passed its self-check in ``config`` (run on the first call); see the module doc."""
    if config not in _SELF_CHECKS:
        error = kernel_error(config)
        _SELF_CHECKS[config] = error
        if error is not None and impl == "auto":
            logger.warning(
                f"fused attention failed its self-check on {config.describe()}: {error}. This configuration "
                f"uses the dense attention for the rest of the process ({FLAG} dense silences this check; "
                f"please report it with your GPU, torch and triton versions)."
            )
    error = _SELF_CHECKS[config]
    if error is not None and impl == "fused":
        raise RuntimeError(f"{FLAG} fused: the fused kernel failed its self-check on {config.describe()}: {error}. "
                           f"Use {FLAG} auto (which falls back to the dense attention) or dense.")
    return error is None


def _why_not_fused(x: torch.Tensor, dropout_p: float, dot_product: bool, forced: bool) -> Optional[str]:
    if not dot_product:
        return "dot-product-free attention (scores from positions only) has no fused kernel"
    if x.size(-1) > 128:
        return f"head dim {x.size(-1)} exceeds the kernel's 128"
    if x.size(0) * x.size(1) > 65535:
        return f"batch x heads = {x.size(0) * x.size(1)} exceeds the kernel grid's 65535"
    if not 0 <= dropout_p < 1:
        return f"attention dropout {dropout_p} is not in [0, 1)"
    if dropout_p > 0 and x.size(2) > MAX_DROPOUT_LENGTH:
        return f"attention dropout in the kernel supports lengths up to {MAX_DROPOUT_LENGTH}, not {x.size(2)}"
    if x.dtype == torch.float32 and not forced and not torch.backends.cuda.matmul.allow_tf32:
        # Full-precision products run without tensor cores: slower than the dense path's matmuls.
        return "float32 without TF32 (torch.backends.cuda.matmul.allow_tf32 is off)"
    interpreted = x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
    if x.device.type != "cuda" and not (forced and interpreted):
        return f"tensors are on {x.device.type}; the kernel needs CUDA (or TRITON_INTERPRET=1 on CPU, for tests)"
    if x.dtype not in _FUSED_DTYPES and not interpreted:
        return f"{x.dtype} is not float16, bfloat16 or float32"
    if not triton_available():
        return "triton is not installed (pip install triton)"
    return None


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


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


def fused_relative_attention(q, k, v, bias_table=None, c_table=None, key_padding_mask=None,
                             dropout_p=0.0) -> torch.Tensor:
    """Causal ``dropout(softmax(Q K^T + B) ⊙ C) V`` by the fused kernel; ``q`` (B, H, T, d) already scaled
    (and q, k already rotated, for RoPE); ``bias_table``, ``c_table``: ``(H, >= T)`` values at causal
    distances ``0, 1, ...`` (or ``None``). The dropout mask comes from torch's generator on q's device
    (``--seed`` makes it reproducible).
    """
    from .fused_urpe_attention import fused_causal_urpe_attention  # imports triton

    if key_padding_mask is not None:
        key_padding_mask = key_padding_mask.to(torch.bool)
    return fused_causal_urpe_attention(q, k, v, bias_table, c_table, key_padding_mask, scale=1.0, dropout_p=dropout_p)
