"""Fused causal URPE attention in Triton: FlashAttention-2 with a relative bias and a Toeplitz reweighting.

    S_ij = scale * q_i . k_j + b(i - j)          keys j <= i; padded keys score float32's lowest value
    P    = softmax(S)  row-wise                  online: running row max m_i and row sum l_i, never T x T
    O    = (P ⊙ C) V                             C_ij = c(i - j)   (c = 1: plain RPE attention)

Backward, recomputing P tile by tile from the stored m and l (O(T) extra memory):

    D_i = dO_i . O_i     dW = dO V^T     dV = (P ⊙ C)^T dO     dP = dW ⊙ C     dS = P ⊙ (dP - D_i)
    dQ  = scale dS K     dK = scale dS^T Q
    db(k) = sum over the diagonal i - j = k of dS       dc(k) = sum over i - j = k of dW ⊙ P

``b`` and ``c`` come per head as tables by distance, ``(H, >= T)`` (entry k for distance k). Padded keys
follow the dense attention in ``fairseq_urpe/modules/urpe_attention.py``: their score is the most negative
finite float32 rather than -inf, so a query whose visible keys are all padding averages them uniformly
and stays finite, and no gradient flows into their scores. This module imports only torch and triton.
"""

import math
from typing import Optional

import torch
import triton
import triton.language as tl

PAD_SCORE = tl.constexpr(-3.4028234663852886e38)  # torch.finfo(torch.float32).min
MAX_HEAD_DIM = 128


@triton.jit
def _scores_and_probabilities(
    q, k, rows, cols, m, l, b, h, BIAS, PAD, stride_bias_h, stride_pad_b, T, scale,
    HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """Recompute one (BLOCK_M, BLOCK_N) tile of P from the row max ``m`` and row sum ``l``; also its mask."""
    distance = rows[:, None] - cols[None, :]  # (BLOCK_M, BLOCK_N): i - j
    visible = (distance >= 0) & (rows[:, None] < T) & (cols[None, :] < T)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * scale
    if HAS_BIAS:
        s += tl.load(BIAS + h * stride_bias_h + tl.maximum(distance, 0), mask=visible, other=0.0)
    if HAS_PAD:
        padded = tl.load(PAD + b * stride_pad_b + cols, mask=cols < T, other=1) != 0  # (BLOCK_N,)
        s = tl.where(padded[None, :], PAD_SCORE, s)
        visible_unpadded = visible & (padded[None, :] == 0)
    else:
        visible_unpadded = visible
    s = tl.where(visible, s, float("-inf"))
    p = tl.exp(s - m[:, None]) / l[:, None]
    return p, distance, visible, visible_unpadded


@triton.jit
def _forward_kernel(
    Q, K, V, BIAS, CTAB, PAD, Out, RowMax, RowSum,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_bias_h, stride_c_h, stride_pad_b,
    H, T, D, scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """One program: BLOCK_M queries of one (batch, head), streaming over keys 0 .. the diagonal."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    row_mask = (rows[:, None] < T) & (dims[None, :] < D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
                mask=row_mask, other=0.0)  # (BLOCK_M, BLOCK_D)

    m_i = tl.full([BLOCK_M], float("-inf"), ACC)  # running row max of S
    l_i = tl.zeros([BLOCK_M], ACC)  # running row sum of exp(S - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], ACC)  # running (exp(S - m_i) ⊙ C) V
    hi = tl.minimum(start_m + BLOCK_M, T)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        col_mask = (cols[:, None] < T) & (dims[None, :] < D)
        k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd,
                    mask=col_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
        v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd,
                    mask=col_mask, other=0.0)
        distance = rows[:, None] - cols[None, :]  # (BLOCK_M, BLOCK_N): i - j
        visible = (distance >= 0) & (cols[None, :] < T)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * scale
        if HAS_BIAS:
            s += tl.load(BIAS + h * stride_bias_h + tl.maximum(distance, 0), mask=visible, other=0.0)
        if HAS_PAD:
            padded = tl.load(PAD + b * stride_pad_b + cols, mask=cols < T, other=1) != 0
            s = tl.where(padded[None, :], PAD_SCORE, s)
        # Key 0 is visible to every row, so m_i is finite after the first tile and later tiles whose
        # row is all -inf leave it alone.
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if HAS_C:
            p = p * tl.load(CTAB + h * stride_c_h + tl.maximum(distance, 0), mask=visible, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION, out_dtype=ACC)
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(Out + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + dims[None, :] * stride_od,
             out.to(Out.dtype.element_ty), mask=row_mask)
    tl.store(RowMax + bh * T + rows, m_i, mask=rows < T)
    tl.store(RowSum + bh * T + rows, l_i, mask=rows < T)


@triton.jit
def _add_diagonal_sums(x, GRAD, start_m, start_n, T, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """GRAD[k] += the sum of the tile ``x`` (rows start_m.., columns start_n..) along its diagonal i - j = k.

    One gather shears the tile cyclically along its longer side L so that every diagonal lies in one
    line: with BLOCK_M >= BLOCK_N, entry (v, c) takes x[(c + v) mod L, c], on local diagonal v (where
    c + v < L) or v - L (where it wrapped); the transposed rule otherwise. Two masked sums then give
    2 L diagonal sums, added to GRAD atomically. The sheared tile is the size of the tile.
    """
    if BLOCK_M >= BLOCK_N:
        v = tl.arange(0, BLOCK_M)[:, None]
        c = tl.arange(0, BLOCK_N)[None, :]
        sheared = tl.gather(x, (c + v) % BLOCK_M, axis=0)  # (BLOCK_M, BLOCK_N)
        wrapped = (c + v) >= BLOCK_M
        here = tl.sum(tl.where(wrapped, 0.0, sheared), 1)  # (BLOCK_M,): local diagonals 0 .. L - 1
        back = tl.sum(tl.where(wrapped, sheared, 0.0), 1)  # local diagonals -L .. -1
        length: tl.constexpr = BLOCK_M
    else:
        r = tl.arange(0, BLOCK_M)[:, None]
        u = tl.arange(0, BLOCK_N)[None, :]
        sheared = tl.gather(x, (r + BLOCK_N - u) % BLOCK_N, axis=1)  # entry (r, u): x[r, (r - u) mod L]
        wrapped = u > r
        here = tl.sum(tl.where(wrapped, 0.0, sheared), 0)  # (BLOCK_N,): local diagonals 0 .. L - 1
        back = tl.sum(tl.where(wrapped, sheared, 0.0), 0)  # local diagonals -L .. -1
        length: tl.constexpr = BLOCK_N
    k = start_m - start_n + tl.arange(0, length)
    tl.atomic_add(GRAD + k, here, mask=k < T)
    tl.atomic_add(GRAD + k - length, back, mask=(k - length >= 0) & (k - length < T))


@triton.jit
def _backward_dkdv_kernel(
    Q, K, V, BIAS, CTAB, PAD, DO, RowMax, RowSum, Delta, DK, DV, DBIAS, DC,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_bias_h, stride_c_h, stride_pad_b,
    H, T, D, scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """One program: BLOCK_N keys of one (batch, head), streaming over the queries that see them.

    Accumulates dK and dV in registers and adds the tile's diagonal sums to the table gradients.
    dK, dV are laid out like K, V (same strides).
    """
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    cols = start_n + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    col_mask = (cols[:, None] < T) & (dims[None, :] < D)
    k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd,
                mask=col_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
    v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd,
                mask=col_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], ACC)
    dv = tl.zeros([BLOCK_N, BLOCK_D], ACC)
    for start_m in range((start_n // BLOCK_M) * BLOCK_M, T, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        row_mask = (rows[:, None] < T) & (dims[None, :] < D)
        q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
                    mask=row_mask, other=0.0)  # (BLOCK_M, BLOCK_D)
        do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dot + dims[None, :] * stride_dod,
                     mask=row_mask, other=0.0)
        m = tl.load(RowMax + bh * T + rows, mask=rows < T, other=0.0)
        l = tl.load(RowSum + bh * T + rows, mask=rows < T, other=1.0)
        delta = tl.load(Delta + bh * T + rows, mask=rows < T, other=0.0)
        p, distance, visible, unpadded = _scores_and_probabilities(
            q, k, rows, cols, m, l, b, h, BIAS, PAD, stride_bias_h, stride_pad_b, T, scale,
            HAS_BIAS, HAS_PAD, PRECISION, ACC)
        dw = tl.dot(do, tl.trans(v), input_precision=PRECISION, out_dtype=ACC)  # (BLOCK_M, BLOCK_N)
        if HAS_C:
            c = tl.load(CTAB + h * stride_c_h + tl.maximum(distance, 0), mask=visible, other=0.0)
            w = p * c
            dp = dw * c
        else:
            w = p
            dp = dw
        dv += tl.dot(tl.trans(w.to(do.dtype)), do, input_precision=PRECISION, out_dtype=ACC)
        ds = tl.where(unpadded, p * (dp - delta[:, None]), 0.0)  # masked scores pass no gradient
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION, out_dtype=ACC)
        if BIAS_GRAD:
            _add_diagonal_sums(ds, DBIAS + h * stride_bias_h, start_m, start_n, T, BLOCK_M, BLOCK_N)
        if C_GRAD:
            _add_diagonal_sums(dw * p, DC + h * stride_c_h, start_m, start_n, T, BLOCK_M, BLOCK_N)
    dk *= scale
    tl.store(DK + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd,
             dk.to(DK.dtype.element_ty), mask=col_mask)
    tl.store(DV + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd,
             dv.to(DV.dtype.element_ty), mask=col_mask)


@triton.jit
def _backward_dq_kernel(
    Q, K, V, BIAS, CTAB, PAD, DO, RowMax, RowSum, Delta, DQ, DBIAS, DC,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_bias_h, stride_c_h, stride_pad_b,
    H, T, D, scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """One program: dQ for BLOCK_M queries of one (batch, head); dQ is laid out like Q."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    row_mask = (rows[:, None] < T) & (dims[None, :] < D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
                mask=row_mask, other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dot + dims[None, :] * stride_dod,
                 mask=row_mask, other=0.0)
    m = tl.load(RowMax + bh * T + rows, mask=rows < T, other=0.0)
    l = tl.load(RowSum + bh * T + rows, mask=rows < T, other=1.0)
    delta = tl.load(Delta + bh * T + rows, mask=rows < T, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], ACC)
    hi = tl.minimum(start_m + BLOCK_M, T)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        col_mask = (cols[:, None] < T) & (dims[None, :] < D)
        k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd,
                    mask=col_mask, other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd,
                    mask=col_mask, other=0.0)
        p, distance, visible, unpadded = _scores_and_probabilities(
            q, k, rows, cols, m, l, b, h, BIAS, PAD, stride_bias_h, stride_pad_b, T, scale,
            HAS_BIAS, HAS_PAD, PRECISION, ACC)
        dw = tl.dot(do, tl.trans(v), input_precision=PRECISION, out_dtype=ACC)
        if HAS_C:
            dp = dw * tl.load(CTAB + h * stride_c_h + tl.maximum(distance, 0), mask=visible, other=0.0)
        else:
            dp = dw
        ds = tl.where(unpadded, p * (dp - delta[:, None]), 0.0)
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION, out_dtype=ACC)
        if BIAS_GRAD:
            _add_diagonal_sums(ds, DBIAS + h * stride_bias_h, start_m, start_n, T, BLOCK_M, BLOCK_N)
        if C_GRAD:
            _add_diagonal_sums(dw * p, DC + h * stride_c_h, start_m, start_n, T, BLOCK_M, BLOCK_N)
    dq *= scale
    tl.store(DQ + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
             dq.to(DQ.dtype.element_ty), mask=row_mask)


# Tiles (BLOCK_M queries, BLOCK_N keys, warps) of the three kernels, and which backward kernel adds the
# table gradients. Chosen on a machine without a GPU: the largest tiles that ptxas (sm_90, bf16, head dim
# 64) compiles without register spills; untimed (benchmarks/fused_kernel.py --blocks tries others).
GPU_BLOCKS = dict(forward=(128, 64, 8), dkdv=(32, 128, 8), dq=(128, 32, 8), table_grads="dq", num_stages=2)
# Under the interpreter: small tiles, both shapes of dK/dQ tiles, so tests exercise both shears.
INTERPRETER_BLOCKS = dict(forward=(16, 16, 1), dkdv=(16, 32, 1), dq=(32, 16, 1), table_grads="dq", num_stages=1)


def _blocks(device: torch.device, head_dim: int, blocks: Optional[dict]) -> dict:
    chosen = dict(INTERPRETER_BLOCKS if device.type == "cpu" else GPU_BLOCKS)
    if device.type != "cpu" and head_dim > 64:
        chosen.update(forward=(64, 64, 4), dkdv=(32, 64, 4), dq=(64, 32, 4))
    chosen.update(blocks or {})
    return chosen


def _accumulator(dtype: torch.dtype):
    return (tl.float64, torch.float64) if dtype == torch.float64 else (tl.float32, torch.float32)


def _precision(dtype: torch.dtype) -> str:
    """float32 matmuls as torch does them: TF32 only where torch allows it for CUDA matmuls."""
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def launch_forward(q, k, v, bias, ctab, pad, out, row_max, row_sum, scale: float, cfg: dict) -> None:
    """Run the forward kernel: ``out`` (laid out like ``q``), ``row_max`` and ``row_sum`` ``(B * H, T)``.

    ``bias``, ``ctab`` ``(H, >= T)`` in the accumulator's dtype, ``pad`` ``(B, T)`` int8, or ``None``.
    """
    batch, heads, length, head_dim = q.shape
    acc_tl, _ = _accumulator(q.dtype)
    dummy = row_max
    block_m, block_n, warps = cfg["forward"]
    _forward_kernel[(triton.cdiv(length, block_m), batch * heads)](
        q, k, v, _or(bias, dummy), _or(ctab, dummy), _or(pad, dummy), out, row_max, row_sum,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        _row_stride(bias), _row_stride(ctab), _row_stride(pad),
        heads, length, head_dim, scale,
        HAS_BIAS=bias is not None, HAS_C=ctab is not None, HAS_PAD=pad is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_block_d(head_dim),
        PRECISION=_precision(q.dtype), ACC=acc_tl, num_warps=warps, num_stages=cfg["num_stages"],
    )


def launch_backward(q, k, v, bias, ctab, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c,
                    scale: float, cfg: dict) -> None:
    """Run the two backward kernels: ``dq``, ``dk``, ``dv`` (laid out like q, k, v), and add the table
    gradients into ``d_bias``, ``d_c`` (zeroed, laid out like ``bias``, ``ctab``; ``None``: not wanted).

    ``delta`` ``(B * H, T)``: ``D_i = dO_i . O_i``.
    """
    batch, heads, length, head_dim = q.shape
    acc_tl, _ = _accumulator(q.dtype)
    dummy = row_max
    if dk.stride() != k.stride() or dv.stride() != v.stride() or dq.stride() != q.stride():
        raise ValueError("dq, dk, dv must be laid out like q, k, v: the kernels reuse the strides")
    common = (
        *q.stride(), *k.stride(), *v.stride(), *grad_out.stride(),
        _row_stride(bias), _row_stride(ctab), _row_stride(pad),
        heads, length, head_dim, scale,
    )
    flags = dict(HAS_BIAS=bias is not None, HAS_C=ctab is not None, HAS_PAD=pad is not None,
                 BLOCK_D=_block_d(head_dim), PRECISION=_precision(q.dtype), ACC=acc_tl,
                 num_stages=cfg["num_stages"])
    tables = (_or(bias, dummy), _or(ctab, dummy), _or(pad, dummy))
    in_dq = cfg["table_grads"] == "dq"
    bias_grad, c_grad = d_bias is not None, d_c is not None
    block_m, block_n, warps = cfg["dkdv"]
    _backward_dkdv_kernel[(triton.cdiv(length, block_n), batch * heads)](
        q, k, v, *tables, grad_out, row_max, row_sum, delta, dk, dv, _or(d_bias, dummy), _or(d_c, dummy),
        *common, BIAS_GRAD=bias_grad and not in_dq, C_GRAD=c_grad and not in_dq,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, **flags,
    )
    block_m, block_n, warps = cfg["dq"]
    _backward_dq_kernel[(triton.cdiv(length, block_m), batch * heads)](
        q, k, v, *tables, grad_out, row_max, row_sum, delta, dq, _or(d_bias, dummy), _or(d_c, dummy),
        *common, BIAS_GRAD=bias_grad and in_dq, C_GRAD=c_grad and in_dq,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, **flags,
    )


def _or(x, default):
    return default if x is None else x


def _row_stride(x) -> int:
    return 0 if x is None else x.stride(0)


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


class FusedCausalURPEAttention(torch.autograd.Function):
    """Autograd wrapper of the Triton kernels; use :func:`fused_causal_urpe_attention`."""

    @staticmethod
    def forward(ctx, q, k, v, bias_by_distance, c_by_distance, key_padding_mask, scale, blocks):
        batch, heads, length, head_dim = q.shape
        _, acc_torch = _accumulator(q.dtype)
        cfg = _blocks(q.device, head_dim, blocks)
        bias = bias_by_distance.to(acc_torch).contiguous() if bias_by_distance is not None else None
        ctab = c_by_distance.to(acc_torch).contiguous() if c_by_distance is not None else None
        pad = key_padding_mask.to(torch.int8).contiguous() if key_padding_mask is not None else None
        out = torch.empty_like(q)
        row_max = torch.empty(batch * heads, length, device=q.device, dtype=acc_torch)
        row_sum = torch.empty_like(row_max)
        launch_forward(q, k, v, bias, ctab, pad, out, row_max, row_sum, scale, cfg)
        ctx.save_for_backward(q, k, v, out, bias, ctab, pad, row_max, row_sum)
        ctx.table_dtypes = (
            bias_by_distance.dtype if bias_by_distance is not None else None,
            c_by_distance.dtype if c_by_distance is not None else None,
        )
        ctx.scale, ctx.cfg = scale, cfg
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, bias, ctab, pad, row_max, row_sum = ctx.saved_tensors
        batch, heads, length, head_dim = q.shape
        _, acc_torch = _accumulator(q.dtype)
        delta = (grad_out.to(acc_torch) * out.to(acc_torch)).sum(-1).reshape(batch * heads, length)  # D_i
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        d_bias = torch.zeros_like(bias) if bias is not None and ctx.needs_input_grad[3] else None  # (H, >= T)
        d_c = torch.zeros_like(ctab) if ctab is not None and ctx.needs_input_grad[4] else None
        launch_backward(q, k, v, bias, ctab, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c,
                        ctx.scale, ctx.cfg)
        bias_dtype, c_dtype = ctx.table_dtypes
        return (
            dq, dk, dv,
            d_bias.to(bias_dtype) if d_bias is not None else None,
            d_c.to(c_dtype) if d_c is not None else None,
            None, None, None,
        )


def fused_causal_urpe_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias_by_distance: Optional[torch.Tensor] = None,
    c_by_distance: Optional[torch.Tensor] = None,
    key_padding_mask: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    blocks: Optional[dict] = None,
) -> torch.Tensor:
    """Causal ``(softmax(scale Q K^T + B) ⊙ C) V`` without a ``T x T`` matrix, forward and backward.

    Args:
        q, k, v: ``(B, H, T, d)``, float16, bfloat16 or float32 (float64 under Triton's interpreter),
            any strides; ``d <= 128``.
        bias_by_distance: ``(H, >= T)``: ``B_ij = bias_by_distance[h, i - j]``, or ``None``.
        c_by_distance: ``(H, >= T)``: ``C_ij = c_by_distance[h, i - j]``, or ``None`` (``C = 1``).
        key_padding_mask: ``(B, T)`` bool, true at padded keys, or ``None``.
        scale: multiplies ``Q K^T``; default ``1 / sqrt(d)``.
        blocks: overrides of the tile choices (keys and values as in ``GPU_BLOCKS``).

    Returns ``(B, H, T, d)`` laid out like ``q``; gradients reach q, k, v and both tables (float32
    accumulation, diagonal sums by atomic adds, so table gradients are not bitwise deterministic).
    """
    batch, heads, length, head_dim = q.shape
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must have one shape (B, H, T, d); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head dim {head_dim} exceeds the kernel's maximum of {MAX_HEAD_DIM}")
    for name, table in (("bias_by_distance", bias_by_distance), ("c_by_distance", c_by_distance)):
        if table is not None and (table.dim() != 2 or table.size(0) != heads or table.size(1) < length):
            raise ValueError(f"{name} must be (H={heads}, >= T={length}); got {tuple(table.shape)}")
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (batch, length):
        raise ValueError(f"key_padding_mask must be (B={batch}, T={length}); got {tuple(key_padding_mask.shape)}")
    if batch * heads > 65535:
        raise ValueError(f"batch x heads = {batch * heads} exceeds the kernel grid's 65535")
    if length == 0:
        return torch.empty_like(q)
    # Gradients are allocated like their inputs and written with the inputs' strides: make overlapping
    # or gapped views (e.g. expanded k, v) dense first.
    q, k, v = (x if torch.empty_like(x).stride() == x.stride() else x.contiguous() for x in (q, k, v))
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    return FusedCausalURPEAttention.apply(q, k, v, bias_by_distance, c_by_distance, key_padding_mask, scale, blocks)
