"""Causal attention with a per-distance bias and URPE's Toeplitz ``C`` through PyTorch's FlexAttention.

The tables are the fused kernel's: ``(H, n)`` values at causal distances ``0 .. n-1``, the last standing for
every distance past it; ``q`` comes scaled (flex's own scale is 1). ``s`` is a score ``q_i . k_j``,
``b = b[h, min(i - j, n - 1)]``, and each flex call gives ``O`` (B, H, T, d) and its log-sum-exp ``L``
(B, H, T), natural log, differentiable:

    bias only        O = flex(s + b)                                                      one call
    URPE, shifted    c' = c + k_h > 0           O1, L1 = flex(s + b + log c')
                                                O0, L0 = flex(s + b)
                     out = exp(L1 - L0) O1 - k_h O0                                        two calls
    URPE, band       c constant from k0 = n_c - 1, with keys past it (k0 < T - 1); c_far = c[h, k0]
                     band (0 <= i - j < k0):    O1, L1 = flex(s + b + log c'),  O0, L0 = flex(s + b)
                     far  (i - j >= k0):        Of, Lf = flex(s + b)
                     out = (e^L1 O1 - k_h e^L0 O0 + c_far e^Lf Of) / (e^L0 + e^Lf)          three calls

Both follow from ``e^L O = sum_j e^(S_ij) v_j`` over a call's keys: ``e^L1 O1 = sum_j e^(s + b) (c + k_h) v_j``
and ``e^L0 + e^Lf`` is the softmax's normaliser over all keys. The band calls read only the blocks within
``k0`` of the diagonal; the far call is mask-only (no table read past the band). ``k_h`` (detached) is 0
where ``c_h > 0``, else it lifts ``c'`` to a hundredth of ``max |c_h|``; any ``k_h`` gives the same result.

:class:`FlexEngine` runs the calls: compiled (``torch.compile(flex_attention, dynamic=False)``) or eager
(the unfused reference, for tests), block masks cached per (mask, length, device), lengths padded to a
multiple of ``bucket`` (future and padded keys are masked, so padding changes nothing), and each compiled
shape counted: past torch's recompile limit a call is refused (``None``) rather than left to dynamo's
unfused fallback, and the refusal is logged. Imports only torch.
"""

import logging
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

logger = logging.getLogger(__name__)

BUCKET = 128  # lengths are padded to a multiple of this (flex's block size): one compile per bucket
SHIFT_FLOOR = 1e-2  # c' = c + k_h is at least this fraction of max |c_h|

# A call's keys: ("causal",), ("band", k0): 0 <= i - j < k0, ("far", k0): i - j >= k0.
Mask = Tuple


def mask_mod(mask: Mask) -> Callable:
    """The flex ``mask_mod`` of ``mask`` (see :data:`Mask`)."""
    if mask[0] == "causal":
        return lambda b, h, q, kv: q >= kv
    near = mask[1]
    if mask[0] == "band":
        return lambda b, h, q, kv: (q >= kv) & (q - kv < near)
    return lambda b, h, q, kv: q - kv >= near


def table_score_mod(table: Optional[Tensor]) -> Optional[Callable]:
    """``s + table[h, min(i - j, n - 1)]`` as a flex ``score_mod`` (``None`` without a table). The distance is
    clamped to ``0 .. n-1`` before indexing: flex evaluates masked elements of partial blocks too."""
    if table is None:
        return None
    last = table.size(1) - 1

    def score_mod(score, b, h, q, kv):
        return score + table[h, (q - kv).clamp(0, last)]

    return score_mod


def extend(table: Tensor, size: int) -> Tensor:
    """``(H, n)`` to ``(H, size)``, ``size >= n``, repeating the last entry (which stands for every distance past it)."""
    return torch.cat([table, table[:, -1:].expand(-1, size - table.size(1))], dim=1)


def shift(c_table: Tensor) -> Tensor:
    """``k_h`` (H,), detached: 0 where ``c_h`` is at least ``SHIFT_FLOOR max |c_h|`` everywhere, else what lifts
    ``c_h + k_h`` to that floor."""
    c = c_table.detach()
    floor = SHIFT_FLOOR * c.abs().amax(dim=1).clamp(min=torch.finfo(c.dtype).tiny)
    return (floor - c.amin(dim=1)).clamp(min=0)


# attend(q, k, v, table or None, mask) -> (O, L): one flex call over the keys of ``mask``, scores s + table.
Attend = Callable[[Tensor, Tensor, Tensor, Optional[Tensor], Mask], Tuple[Tensor, Tensor]]


def causal_flex_attention(q: Tensor, k: Tensor, v: Tensor, bias_table: Optional[Tensor], c_table: Optional[Tensor],
                          attend: Attend) -> Tensor:
    """``(B, H, T, d)`` causal ``(softmax(q k^T + B) ⊙ C) V`` by the forms of the module doc; ``attend`` runs
    each call (:meth:`FlexEngine.attend`, or a dense one in tests). Tables as the module doc says."""
    length = q.size(2)
    if c_table is None:
        return attend(q, k, v, bias_table, ("causal",))[0]
    dtype = torch.promote_types(q.dtype, torch.float32)
    c = c_table.to(dtype)
    n = max(c.size(1), bias_table.size(1) if bias_table is not None else 1)
    k_h = shift(c)  # (H,)
    log_c = torch.log(extend(c, n) + k_h[:, None])  # (H, n)
    shifted = log_c if bias_table is None else extend(bias_table.to(dtype), n) + log_c  # b + log c': (H, n)
    k_h = k_h.view(1, -1, 1)  # (1, H, 1), against L (B, H, T)
    near = c.size(1) - 1  # c is constant from this distance on
    if near >= length - 1 or near < 1:  # no far keys (or no band): the shifted form over all keys
        o1, l1 = attend(q, k, v, shifted, ("causal",))
        o0, l0 = attend(q, k, v, bias_table, ("causal",))
        out = torch.exp(l1 - l0)[..., None] * o1.to(dtype) - k_h[..., None] * o0.to(dtype)
        return out.to(v.dtype)
    o1, l1 = attend(q, k, v, shifted, ("band", near))
    o0, l0 = attend(q, k, v, bias_table, ("band", near))
    of, lf = attend(q, k, v, bias_table, ("far", near))  # rows i < k0 have no far keys: Lf = -inf, Of = 0
    top = torch.maximum(torch.maximum(l0, l1), lf)  # finite: the band holds the diagonal
    w1, w0, wf = (torch.exp(x - top) for x in (l1, l0, lf))  # (B, H, T)
    c_far = c[:, near].view(1, -1, 1)  # (1, H, 1)
    out = (w1[..., None] * o1.to(dtype) - (k_h * w0)[..., None] * o0.to(dtype)
           + (c_far * wf)[..., None] * of.to(dtype)) / (w0 + wf)[..., None]
    return out.to(v.dtype)


class FlexEngine:
    """Runs flex calls for :func:`causal_flex_attention` (``attend``), padding lengths to ``bucket``.

    ``compiled``: through ``torch.compile(flex_attention, dynamic=False)`` (the fused path; on CPU forward
    only, and without the log-sum-exp), else flex's eager reference (unfused: it materialises the scores).
    ``shape_limit``: the most distinct compiled shapes (default: torch._dynamo's ``recompile_limit``);
    :meth:`admits` says whether a call stays within it.
    """

    def __init__(self, compiled: bool = True, bucket: int = BUCKET, shape_limit: Optional[int] = None):
        self.compiled, self.bucket = compiled, bucket
        self.flex = torch.compile(flex_attention, dynamic=False) if compiled else flex_attention
        if shape_limit is None:
            shape_limit = int(getattr(torch._dynamo.config, "recompile_limit", 8))
        self.shape_limit = shape_limit
        self.block_masks: Dict[tuple, object] = {}
        self.shapes: Dict[tuple, int] = {}  # compiled call shape -> order of first use

    def padded(self, length: int) -> int:
        return -(-length // self.bucket) * self.bucket

    def call_shapes(self, q: Tensor, bias_table: Optional[Tensor], c_table: Optional[Tensor]):
        """The compiled shapes one :func:`causal_flex_attention` call of these inputs runs (what dynamo
        guards on: sizes, dtypes, device, grad mode, which score and mask, whether the LSE is returned)."""
        batch, heads, length, head_dim = q.shape
        base = (batch, heads, self.padded(length), head_dim, q.dtype, str(q.device), torch.is_grad_enabled())
        bias = None if bias_table is None else (bias_table.dtype, bias_table.requires_grad)
        if c_table is None:
            return [base + (bias, ("causal",), False)]
        near = c_table.size(1) - 1
        shifted = (torch.promote_types(q.dtype, torch.float32), c_table.requires_grad or bool(bias and bias[1]))
        masks = [("causal",)] if near >= length - 1 or near < 1 else [("band", near), ("far", near)]
        shapes = [base + (shifted, masks[0], True), base + (bias, masks[0], True)]
        return shapes + ([base + (bias, masks[1], True)] if len(masks) > 1 else [])

    def admits(self, q: Tensor, bias_table: Optional[Tensor], c_table: Optional[Tensor]) -> bool:
        """Whether this call's compiled shapes fit within ``shape_limit`` (counting the ones seen before);
        records them where they do. Always true when not compiled."""
        if not self.compiled:
            return True
        new = [s for s in self.call_shapes(q, bias_table, c_table) if s not in self.shapes]
        if len(self.shapes) + len(new) > self.shape_limit:
            return False
        for s in new:
            self.shapes[s] = len(self.shapes)
            logger.info(f"flex attention: compiling shape {len(self.shapes)} of at most {self.shape_limit} "
                        f"(B={s[0]}, H={s[1]}, length {s[2]}, head dim {s[3]}, {str(s[4]).replace('torch.', '')}, "
                        f"{s[8][0]} keys)")
        return True

    def block_mask(self, mask: Mask, length: int, device: torch.device):
        key = (mask, length, str(device))
        if key not in self.block_masks:
            self.block_masks[key] = create_block_mask(mask_mod(mask), None, None, length, length, device=device,
                                                      BLOCK_SIZE=self.bucket)
        return self.block_masks[key]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, table: Optional[Tensor], mask: Mask,
               lse: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
        """One flex call on inputs padded to the bucket (then cut back): ``(O, L)``, ``L`` only with ``lse``."""
        length = q.size(2)
        padded = self.padded(length)
        if padded != length:
            q, k, v = (F.pad(x, (0, 0, 0, padded - length)) for x in (q, k, v))
        block_mask = self.block_mask(mask, padded, q.device)
        if lse:
            out, aux = self.flex(q, k, v, score_mod=table_score_mod(table), block_mask=block_mask, scale=1.0,
                                 return_aux=AuxRequest(lse=True))
            return out[:, :, :length], aux.lse[:, :, :length]
        out = self.flex(q, k, v, score_mod=table_score_mod(table), block_mask=block_mask, scale=1.0)
        return out[:, :, :length], None

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, bias_table: Optional[Tensor] = None,
                 c_table: Optional[Tensor] = None) -> Tensor:
        """:func:`causal_flex_attention` through this engine (a bias-only call asks no log-sum-exp)."""
        if c_table is None:
            return self.attend(q, k, v, bias_table, ("causal",), lse=False)[0]
        return causal_flex_attention(q, k, v, bias_table, c_table, self.attend)
