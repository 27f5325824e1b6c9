"""Which attention computes a call: the fused Triton kernel or the dense PyTorch path.

``--urpe-attention-impl`` (``impl`` here):
  - ``dense``: always the dense path.
  - ``auto`` (default): the fused kernel where it can run (a CUDA tensor, Triton importable, float16,
    bfloat16 or float32, head dim <= 128, no attention dropout, dot-product scores) and the call is one
    it computes; the dense path otherwise.
  - ``fused``: the fused kernel for every call it computes; an error naming the flag where this machine
    or configuration cannot run it (on CPU it runs under Triton's interpreter when ``TRITON_INTERPRET=1``,
    slowly: that is how the tests run it).

Calls the kernel does not compute go to the dense path in every mode: incremental decoding, returning
attention weights, and any mask other than fairseq's causal future mask (e.g. full-context alignment).
Imports only torch; triton is imported the first time the kernel is used.
"""

import os
from collections import OrderedDict
from typing import Optional

import torch

IMPLS = ("auto", "dense", "fused")
FLAG = "--urpe-attention-impl"
_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def use_fused_attention(
    impl: str,
    x: torch.Tensor,
    attn_mask: Optional[torch.Tensor],
    incremental: bool,
    need_weights: bool,
    dropout_active: bool,
    dot_product: bool = True,
) -> bool:
    """True where the fused kernel computes this self-attention call; ``x`` is its ``v`` (or ``q``, ``k``),
    ``(B, H, T, d)``: only its device, dtype and shape are read.

    Raises ``RuntimeError`` naming the flag when ``impl == "fused"`` and the kernel cannot run here.
    """
    if impl not in IMPLS:
        raise ValueError(f"{FLAG} must be one of {', '.join(IMPLS)}; got {impl!r}")
    if impl == "dense" or incremental or need_weights:
        return False
    reason = _why_not_fused(x, dropout_active, dot_product, forced=impl == "fused")
    if reason is not None and impl == "auto":
        return False
    if not is_future_mask(attn_mask, x.size(2)):
        return False
    if reason is not None:
        raise RuntimeError(f"{FLAG} fused cannot run here: {reason}. Use {FLAG} auto (or dense).")
    return True


def _why_not_fused(x: torch.Tensor, dropout_active: bool, dot_product: bool, forced: bool) -> Optional[str]:
    if not dot_product:
        return "dot-product-free attention (scores from positions only) has no fused kernel"
    if dropout_active:
        return "the kernel has no attention dropout; set --attention-dropout 0"
    if x.size(-1) > 128:
        return f"head dim {x.size(-1)} exceeds the kernel's 128"
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


def fused_relative_attention(q, k, v, bias_table=None, c_table=None, key_padding_mask=None) -> torch.Tensor:
    """Causal ``(softmax(Q K^T + B) ⊙ C) V`` by the fused kernel; ``q`` (B, H, T, d) already scaled (and q, k
    already rotated, for RoPE); ``bias_table``, ``c_table``: ``(H, >= T)`` values at causal distances
    ``0, 1, ...`` (or ``None``)."""
    from .fused_urpe_attention import fused_causal_urpe_attention  # imports triton

    if key_padding_mask is not None:
        key_padding_mask = key_padding_mask.to(torch.bool)
    return fused_causal_urpe_attention(q, k, v, bias_table, c_table, key_padding_mask, scale=1.0)
