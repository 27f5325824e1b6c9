"""Fused causal URPE attention in Triton: FlashAttention-2 with a relative bias and a Toeplitz reweighting.

    S_ij = scale * q_i . k_j + b(i - j)          keys j <= i; padded keys score float32's lowest value
    P    = softmax(S)  row-wise                  online: running row max m_i and row sum l_i, never T x T
    O    = dropout(P ⊙ C) V = (P ⊙ C ⊙ Z) V      C_ij = c(i - j) (c = 1: plain RPE attention);
                                                 Z_ij = keep_ij / (1 - p), Z = 1 without dropout

Backward, recomputing P (and Z) tile by tile from the stored m and l (O(T) extra memory):

    D_i = dO_i . O_i     dW = (dO V^T) ⊙ Z     dV = (P ⊙ C ⊙ Z)^T dO     dP = dW ⊙ C     dS = P ⊙ (dP - D_i)
    dQ  = scale dS K     dK = scale dS^T Q
    db(k) = sum over the diagonal i - j = k of dS       dc(k) = sum over i - j = k of dW ⊙ P

``b`` and ``c`` come per head as tables by distance, ``(H, >= T)`` (entry k for distance k). Padded keys
follow the dense attention in ``fairseq_urpe/modules/relative_multihead_attention.py``: their score is the most negative
finite float32 rather than -inf, so a query whose visible keys are all padding averages them uniformly
and stays finite, and no gradient flows into their scores. Attention dropout follows it too: applied to
``P ⊙ C``, scaled by ``1 / (1 - p)``; its mask comes from Philox (counter-based, one seed per call, 16
random bits per entry, one call per 8 keys, as FlashAttention does), so the backward kernels regenerate
it instead of storing it.

Each tile reads its slice of a table (``BLOCK_M + BLOCK_N - 1`` distances) with one load and expands it
in registers; tiles wholly below the diagonal skip the causal mask. This module imports only torch and
triton.
"""

import math
from typing import Optional

import torch
import triton
import triton.language as tl

PAD_SCORE = tl.constexpr(-3.4028234663852886e38)  # torch.finfo(torch.float32).min
MAX_HEAD_DIM = 128
MAX_DROPOUT_LENGTH = 131064  # i * ceil(T / 8) + j // 8, the dropout counter, stays below 2**31


@triton.jit
def _table_tile(TABLE, first, distance, T, L: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    """The (M, N) tile ``TABLE[distance]`` (0 outside the table's 0 .. T - 1), all distances within
    ``first .. first + L - 1``: one load of that slice, expanded in registers by a gather."""
    d = first + tl.arange(0, L)
    entries = tl.load(TABLE + d, mask=(d >= 0) & (d < T), other=0.0)  # (L,)
    return tl.reshape(tl.gather(entries, tl.reshape(distance - first, [M * N]), 0), [M, N])


@triton.jit
def _dropout_scale(seed, bh, rows, start_n, T, dropout_p, M: tl.constexpr, N: tl.constexpr):
    """``Z`` (M, N) for queries ``rows`` and keys ``start_n .. start_n + N - 1`` (a multiple of 8) of head ``bh``:
    ``1 / (1 - p)`` where attention dropout keeps an entry, 0 where it drops it.

    One Philox call, counters ``(i * ceil(T / 8) + j // 8, bh, 0, 0)`` under the call's seed, gives four
    32-bit words: the 16-bit uniforms of 8 consecutive keys; an entry is kept when its uniform is at
    least ``round(p * 65536)``. Every kernel regenerates the same mask from the same counters.
    """
    G: tl.constexpr = N // 8
    counters = rows[:, None] * tl.cdiv(T, 8) + (start_n // 8 + tl.arange(0, G))[None, :]  # (M, G)
    zero = counters * 0
    w0, w1, w2, w3 = tl.philox(seed, counters, zero + bh, zero, zero)
    u = tl.join(tl.join(tl.join(w0 & 0xFFFF, w0 >> 16), tl.join(w1 & 0xFFFF, w1 >> 16)),
                tl.join(tl.join(w2 & 0xFFFF, w2 >> 16), tl.join(w3 & 0xFFFF, w3 >> 16)))  # (M, G, 2, 2, 2)
    threshold = tl.cast(dropout_p * 65536.0 + 0.5, tl.uint32)
    return tl.where(tl.reshape(u, [M, N]) >= threshold, 1.0 / (1.0 - dropout_p), 0.0)


@triton.jit
def _load_seed(SEED, HAS_DROPOUT: tl.constexpr):
    if HAS_DROPOUT:
        seed = tl.load(SEED)
    else:
        seed = 0
    return seed


@triton.jit
def _forward_tile(
    acc, m_i, l_i, q, K, V, BIAS, CTAB, PAD, seed, rows, dims, start_m, start_n, b, h, bh,
    stride_kt, stride_kd, stride_vt, stride_vd, stride_bias_h, stride_c_h, stride_pad_b, T, D: tl.constexpr, scale, dropout_p,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    CAUSAL_MASK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SLICE: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """One key tile of the forward's online softmax; ``CAUSAL_MASK`` only for tiles that cross the diagonal."""
    cols = start_n + tl.arange(0, BLOCK_N)
    col_mask = (cols[:, None] < T) & (dims[None, :] < D)
    k = tl.load(K + cols[:, None] * stride_kt + dims[None, :] * stride_kd, mask=col_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
    v = tl.load(V + cols[:, None] * stride_vt + dims[None, :] * stride_vd, mask=col_mask, other=0.0)
    distance = rows[:, None] - cols[None, :]  # (BLOCK_M, BLOCK_N): i - j
    first = start_m - start_n - (BLOCK_N - 1)  # the tile's smallest distance
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * scale
    if HAS_BIAS:
        s += _table_tile(BIAS + h * stride_bias_h, first, distance, T, SLICE, BLOCK_M, BLOCK_N)
    if HAS_PAD:
        padded = tl.load(PAD + b * stride_pad_b + cols, mask=cols < T, other=1) != 0  # (BLOCK_N,)
        s = tl.where(padded[None, :], PAD_SCORE, s)
    if CAUSAL_MASK:  # for rows < T this also hides keys >= T; rows >= T are never stored
        s = tl.where(distance >= 0, s, float("-inf"))
    # Key 0 is visible to every row and comes first, so m_i is finite after the first tile.
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if HAS_C:
        p = p * _table_tile(CTAB + h * stride_c_h, first, distance, T, SLICE, BLOCK_M, BLOCK_N)
    if HAS_DROPOUT:
        p = p * _dropout_scale(seed, bh, rows, start_n, T, dropout_p, BLOCK_M, BLOCK_N)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION, out_dtype=ACC)
    return acc, m_new, l_i


@triton.jit
def _forward_kernel(
    Q, K, V, BIAS, CTAB, PAD, SEED, Out, RowMax, RowSum,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_bias_h, stride_c_h, stride_pad_b,
    H, T, scale, dropout_p,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """One program: BLOCK_M queries of one (batch, head), streaming over keys 0 .. the diagonal."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    seed = _load_seed(SEED, HAS_DROPOUT)
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    row_mask = (rows[:, None] < T) & (dims[None, :] < D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
                mask=row_mask, other=0.0)  # (BLOCK_M, BLOCK_D)
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    SLICE: tl.constexpr = 2 * max(BLOCK_M, BLOCK_N)  # >= BLOCK_M + BLOCK_N - 1 distances, a power of 2

    m_i = tl.full([BLOCK_M], float("-inf"), ACC)  # running row max of S
    l_i = tl.zeros([BLOCK_M], ACC)  # running row sum of exp(S - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], ACC)  # running (exp(S - m_i) ⊙ C ⊙ Z) V
    below = ((start_m + 1) // BLOCK_N) * BLOCK_N  # key tiles before this one lie wholly below the diagonal
    for start_n in range(0, below, BLOCK_N):
        acc, m_i, l_i = _forward_tile(
            acc, m_i, l_i, q, K, V, BIAS, CTAB, PAD, seed, rows, dims, start_m, start_n, b, h, bh,
            stride_kt, stride_kd, stride_vt, stride_vd, stride_bias_h, stride_c_h, stride_pad_b, T, D, scale,
            dropout_p, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, False, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC)
    for start_n in range(below, tl.minimum(start_m + BLOCK_M, T), BLOCK_N):
        acc, m_i, l_i = _forward_tile(
            acc, m_i, l_i, q, K, V, BIAS, CTAB, PAD, seed, rows, dims, start_m, start_n, b, h, bh,
            stride_kt, stride_kd, stride_vt, stride_vd, stride_bias_h, stride_c_h, stride_pad_b, T, D, scale,
            dropout_p, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, True, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC)

    out = acc / l_i[:, None]
    tl.store(Out + b * stride_ob + h * stride_oh + rows[:, None] * stride_ot + dims[None, :] * stride_od,
             out.to(Out.dtype.element_ty), mask=row_mask)
    tl.store(RowMax + bh * T + rows, m_i, mask=rows < T)
    tl.store(RowSum + bh * T + rows, l_i, mask=rows < T)


@triton.jit
def _add_diagonal_sums(x, GRAD, base, T, A: tl.constexpr, B: tl.constexpr, SIGN: tl.constexpr):
    """GRAD[k] += the sum of the (A, B) tile ``x`` along each diagonal: entry (a, b) is at distance
    ``k = base + SIGN * (a - b)``; only the A + B - 1 diagonals the tile holds, and only ``0 <= k < T``.

    One gather shears the tile cyclically along its longer side L so that every diagonal lies in one
    line: with A >= B, entry (v, c) takes x[(c + v) mod L, c], on local diagonal v (where c + v < L)
    or v - L (where it wrapped); the transposed rule otherwise. Two masked sums then give 2 L diagonal
    sums, added to GRAD by relaxed atomics. The sheared tile is the size of the tile.
    """
    if A >= B:
        v = tl.arange(0, A)[:, None]
        c = tl.arange(0, B)[None, :]
        sheared = tl.gather(x, (c + v) % A, axis=0)  # (A, B)
        wrapped = (c + v) >= A
        here = tl.sum(tl.where(wrapped, 0.0, sheared), 1)  # (A,): local diagonals 0 .. L - 1
        back = tl.sum(tl.where(wrapped, sheared, 0.0), 1)  # local diagonals -L .. -1
        L: tl.constexpr = A
    else:
        r = tl.arange(0, A)[:, None]
        u = tl.arange(0, B)[None, :]
        sheared = tl.gather(x, (r + B - u) % B, axis=1)  # entry (r, u): x[r, (r - u) mod L]
        wrapped = u > r
        here = tl.sum(tl.where(wrapped, 0.0, sheared), 0)  # (B,): local diagonals 0 .. L - 1
        back = tl.sum(tl.where(wrapped, sheared, 0.0), 0)  # local diagonals -L .. -1
        L: tl.constexpr = B
    local = tl.arange(0, L)
    k = base + SIGN * local
    tl.atomic_add(GRAD + k, here, mask=(local < A) & (k >= 0) & (k < T), sem="relaxed")
    k = base + SIGN * (local - L)
    tl.atomic_add(GRAD + k, back, mask=(local > L - B) & (k >= 0) & (k < T), sem="relaxed")


@triton.jit
def _dkdv_tile(
    dk, dv, k, v, Q, DO, RowMax, RowSum, Delta, BIAS, CTAB, DBIAS, DC, seed, padded, cols, dims,
    start_m, start_n, h, bh, stride_qt, stride_qd, stride_dot, stride_dod, stride_bias_h, stride_c_h,
    T, D: tl.constexpr, scale, dropout_p,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr, CAUSAL_MASK: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SLICE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """One query tile of dK, dV, with keys as rows (transposed tiles, ``k q^T``: the products' M is BLOCK_N)."""
    rows = start_m + tl.arange(0, BLOCK_M)
    row_mask = (rows[:, None] < T) & (dims[None, :] < D)
    q = tl.load(Q + rows[:, None] * stride_qt + dims[None, :] * stride_qd, mask=row_mask, other=0.0)  # (BLOCK_M, BLOCK_D)
    do = tl.load(DO + rows[:, None] * stride_dot + dims[None, :] * stride_dod, mask=row_mask, other=0.0)
    m = tl.load(RowMax + bh * T + rows, mask=rows < T, other=float("inf"))  # rows >= T: P = 0
    l = tl.load(RowSum + bh * T + rows, mask=rows < T, other=1.0)
    delta = tl.load(Delta + bh * T + rows, mask=rows < T, other=0.0)
    distance = rows[None, :] - cols[:, None]  # (BLOCK_N, BLOCK_M): i - j
    first = start_m - start_n - (BLOCK_N - 1)
    s = tl.dot(k, tl.trans(q), input_precision=PRECISION, out_dtype=ACC) * scale  # S^T
    if HAS_BIAS:
        s += _table_tile(BIAS + h * stride_bias_h, first, distance, T, SLICE, BLOCK_N, BLOCK_M)
    if HAS_PAD:
        s = tl.where(padded[:, None], PAD_SCORE, s)
    if CAUSAL_MASK:
        s = tl.where(distance >= 0, s, float("-inf"))
    p = tl.exp(s - m[None, :]) / l[None, :]  # P^T
    dw = tl.dot(v, tl.trans(do), input_precision=PRECISION, out_dtype=ACC)  # (dO V^T)^T
    w = p
    if HAS_DROPOUT:
        z = tl.trans(_dropout_scale(seed, bh, rows, start_n, T, dropout_p, BLOCK_M, BLOCK_N))  # Z^T
        dw = dw * z
        w = w * z
    if HAS_C:
        c = _table_tile(CTAB + h * stride_c_h, first, distance, T, SLICE, BLOCK_N, BLOCK_M)
        w = w * c
        dp = dw * c
    else:
        dp = dw
    dv += tl.dot(w.to(do.dtype), do, input_precision=PRECISION, out_dtype=ACC)
    ds = p * (dp - delta[None, :])
    if HAS_PAD:
        ds = tl.where(padded[:, None], 0.0, ds)  # masked scores pass no gradient
    dk += tl.dot(ds.to(q.dtype), q, input_precision=PRECISION, out_dtype=ACC)
    if BIAS_GRAD:
        _add_diagonal_sums(ds, DBIAS + h * stride_bias_h, start_m - start_n, T, BLOCK_N, BLOCK_M, -1)
    if C_GRAD:
        _add_diagonal_sums(dw * p, DC + h * stride_c_h, start_m - start_n, T, BLOCK_N, BLOCK_M, -1)
    return dk, dv


@triton.jit
def _backward_dkdv_kernel(
    Q, K, V, BIAS, CTAB, PAD, SEED, DO, RowMax, RowSum, Delta, DK, DV, DBIAS, DC,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_bias_h, stride_c_h, stride_pad_b,
    H, T, scale, dropout_p,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """One program: BLOCK_N keys of one (batch, head), streaming over the queries that see them.

    Accumulates dK and dV in registers (and, when asked, adds the tiles' diagonal sums to the table
    gradients). dK, dV are laid out like K, V (same strides).
    """
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    seed = _load_seed(SEED, HAS_DROPOUT)
    cols = start_n + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    col_mask = (cols[:, None] < T) & (dims[None, :] < D)
    k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd,
                mask=col_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
    v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd,
                mask=col_mask, other=0.0)
    if HAS_PAD:
        padded = tl.load(PAD + b * stride_pad_b + cols, mask=cols < T, other=1) != 0  # (BLOCK_N,)
    else:
        padded = cols < 0
    Q += b * stride_qb + h * stride_qh
    DO += b * stride_dob + h * stride_doh
    SLICE: tl.constexpr = 2 * max(BLOCK_M, BLOCK_N)
    dk = tl.zeros([BLOCK_N, BLOCK_D], ACC)
    dv = tl.zeros([BLOCK_N, BLOCK_D], ACC)
    lo = (start_n // BLOCK_M) * BLOCK_M  # the first query tile that sees a key of this tile
    above = tl.cdiv(start_n + BLOCK_N - 1, BLOCK_M) * BLOCK_M  # query tiles from here on see every key of it
    for start_m in range(lo, tl.minimum(above, T), BLOCK_M):
        dk, dv = _dkdv_tile(
            dk, dv, k, v, Q, DO, RowMax, RowSum, Delta, BIAS, CTAB, DBIAS, DC, seed, padded, cols, dims,
            start_m, start_n, h, bh, stride_qt, stride_qd, stride_dot, stride_dod, stride_bias_h, stride_c_h,
            T, D, scale, dropout_p, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD, True,
            BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC)
    for start_m in range(above, T, BLOCK_M):
        dk, dv = _dkdv_tile(
            dk, dv, k, v, Q, DO, RowMax, RowSum, Delta, BIAS, CTAB, DBIAS, DC, seed, padded, cols, dims,
            start_m, start_n, h, bh, stride_qt, stride_qd, stride_dot, stride_dod, stride_bias_h, stride_c_h,
            T, D, scale, dropout_p, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD, False,
            BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC)
    dk *= scale
    tl.store(DK + b * stride_kb + h * stride_kh + cols[:, None] * stride_kt + dims[None, :] * stride_kd,
             dk.to(DK.dtype.element_ty), mask=col_mask)
    tl.store(DV + b * stride_vb + h * stride_vh + cols[:, None] * stride_vt + dims[None, :] * stride_vd,
             dv.to(DV.dtype.element_ty), mask=col_mask)


@triton.jit
def _dq_tile(
    dq, q, do, m, l, delta, K, V, BIAS, CTAB, PAD, DBIAS, DC, seed, rows, dims, start_m, start_n, b, h, bh,
    stride_kt, stride_kd, stride_vt, stride_vd, stride_bias_h, stride_c_h, stride_pad_b, T, D: tl.constexpr, scale, dropout_p,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr, CAUSAL_MASK: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SLICE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """One key tile of dQ (and, when asked, of the table gradients)."""
    cols = start_n + tl.arange(0, BLOCK_N)
    col_mask = (cols[:, None] < T) & (dims[None, :] < D)
    k = tl.load(K + cols[:, None] * stride_kt + dims[None, :] * stride_kd, mask=col_mask, other=0.0)
    v = tl.load(V + cols[:, None] * stride_vt + dims[None, :] * stride_vd, mask=col_mask, other=0.0)
    distance = rows[:, None] - cols[None, :]  # (BLOCK_M, BLOCK_N): i - j
    first = start_m - start_n - (BLOCK_N - 1)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * scale
    if HAS_BIAS:
        s += _table_tile(BIAS + h * stride_bias_h, first, distance, T, SLICE, BLOCK_M, BLOCK_N)
    if HAS_PAD:
        padded = tl.load(PAD + b * stride_pad_b + cols, mask=cols < T, other=1) != 0
        s = tl.where(padded[None, :], PAD_SCORE, s)
    if CAUSAL_MASK:
        s = tl.where(distance >= 0, s, float("-inf"))
    p = tl.exp(s - m[:, None]) / l[:, None]
    dw = tl.dot(do, tl.trans(v), input_precision=PRECISION, out_dtype=ACC)
    if HAS_DROPOUT:
        dw = dw * _dropout_scale(seed, bh, rows, start_n, T, dropout_p, BLOCK_M, BLOCK_N)
    if HAS_C:
        dp = dw * _table_tile(CTAB + h * stride_c_h, first, distance, T, SLICE, BLOCK_M, BLOCK_N)
    else:
        dp = dw
    ds = p * (dp - delta[:, None])
    if HAS_PAD:
        ds = tl.where(padded[None, :], 0.0, ds)  # masked scores pass no gradient
    dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION, out_dtype=ACC)
    if BIAS_GRAD:
        _add_diagonal_sums(ds, DBIAS + h * stride_bias_h, start_m - start_n, T, BLOCK_M, BLOCK_N, 1)
    if C_GRAD:
        _add_diagonal_sums(dw * p, DC + h * stride_c_h, start_m - start_n, T, BLOCK_M, BLOCK_N, 1)
    return dq


@triton.jit
def _backward_dq_kernel(
    Q, K, V, BIAS, CTAB, PAD, SEED, DO, RowMax, RowSum, Delta, DQ, DBIAS, DC,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_bias_h, stride_c_h, stride_pad_b,
    H, T, scale, dropout_p,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """One program: dQ for BLOCK_M queries of one (batch, head); dQ is laid out like Q."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    seed = _load_seed(SEED, HAS_DROPOUT)
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    row_mask = (rows[:, None] < T) & (dims[None, :] < D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
                mask=row_mask, other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dot + dims[None, :] * stride_dod,
                 mask=row_mask, other=0.0)
    m = tl.load(RowMax + bh * T + rows, mask=rows < T, other=float("inf"))  # rows >= T: P = 0
    l = tl.load(RowSum + bh * T + rows, mask=rows < T, other=1.0)
    delta = tl.load(Delta + bh * T + rows, mask=rows < T, other=0.0)
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    SLICE: tl.constexpr = 2 * max(BLOCK_M, BLOCK_N)
    dq = tl.zeros([BLOCK_M, BLOCK_D], ACC)
    below = ((start_m + 1) // BLOCK_N) * BLOCK_N
    for start_n in range(0, below, BLOCK_N):
        dq = _dq_tile(
            dq, q, do, m, l, delta, K, V, BIAS, CTAB, PAD, DBIAS, DC, seed, rows, dims, start_m, start_n, b, h, bh,
            stride_kt, stride_kd, stride_vt, stride_vd, stride_bias_h, stride_c_h, stride_pad_b, T, D, scale,
            dropout_p, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD, False,
            BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC)
    for start_n in range(below, tl.minimum(start_m + BLOCK_M, T), BLOCK_N):
        dq = _dq_tile(
            dq, q, do, m, l, delta, K, V, BIAS, CTAB, PAD, DBIAS, DC, seed, rows, dims, start_m, start_n, b, h, bh,
            stride_kt, stride_kd, stride_vt, stride_vd, stride_bias_h, stride_c_h, stride_pad_b, T, D, scale,
            dropout_p, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD, True,
            BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC)
    dq *= scale
    tl.store(DQ + b * stride_qb + h * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
             dq.to(DQ.dtype.element_ty), mask=row_mask)


@triton.jit
def _dropout_mask_kernel(SEED, Out, T, dropout_p, BLOCK: tl.constexpr):
    """``Out[bh, i, j] = Z_ij`` of head ``bh``: the kernels' dropout scale, written out (for tests)."""
    bh = tl.program_id(1)
    seed = tl.load(SEED)
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    for start_n in range(0, T, BLOCK):
        cols = start_n + tl.arange(0, BLOCK)
        z = _dropout_scale(seed, bh, rows, start_n, T, dropout_p, BLOCK, BLOCK)
        tl.store(Out + bh * T * T + rows[:, None] * T + cols[None, :], z, mask=(rows[:, None] < T) & (cols[None, :] < T))


# Tiles (BLOCK_M queries, BLOCK_N keys, warps, pipeline stages) of the three kernels per (dtype: 16-bit,
# TF32 or full float32; head dim <= 64 or wider). Chosen on a machine without a GPU with
# benchmarks/fused_kernel.py --compile-check (sm_90, all tables, padding and dropout on): the largest tiles
# that ptxas compiles without register spills, with wgmma wherever there are tensor cores to use. Only
# TF32 at head dim 128 spills (dK/dV: 120-140 bytes with every tile that keeps wgmma), and full float32
# (forced only) 4 bytes. Untimed: benchmarks/fused_kernel.py --blocks tries others on a GPU.
GPU_BLOCKS = {
    ("16-bit", 64): dict(forward=(128, 64, 8, 2), dkdv=(32, 128, 8, 2), dq=(128, 32, 8, 2)),
    ("16-bit", 128): dict(forward=(128, 64, 8, 2), dkdv=(16, 64, 8, 2), dq=(64, 32, 4, 2)),
    ("tf32", 64): dict(forward=(128, 32, 8, 2), dkdv=(16, 64, 8, 2), dq=(128, 32, 8, 2)),
    ("tf32", 128): dict(forward=(128, 32, 8, 2), dkdv=(32, 64, 8, 2), dq=(64, 16, 8, 2)),
    ("float32", 64): dict(forward=(32, 32, 4, 2), dkdv=(16, 32, 4, 2), dq=(64, 32, 8, 2)),  # no tensor cores
    ("float32", 128): dict(forward=(32, 16, 4, 2), dkdv=(16, 32, 4, 2), dq=(32, 16, 4, 2)),
}
TABLE_GRADS = "dq"
# Under the interpreter: small tiles, both shapes of dK/dQ tiles, so tests exercise both shears.
INTERPRETER_BLOCKS = dict(forward=(16, 16, 1, 1), dkdv=(16, 32, 1, 1), dq=(32, 16, 1, 1), table_grads="dq")


def gpu_blocks(head_dim: int, dtype: torch.dtype, precision: Optional[str] = None) -> dict:
    """The tiles the kernels use on a GPU for this head dim and dtype (float32: TF32 products where torch
    allows them now, or as ``precision``, "tf32" or "ieee", says)."""
    precision = precision or _precision(dtype)
    kind = {"tf32": "tf32", "ieee": "float32"}[precision] if dtype == torch.float32 else "16-bit"
    return dict(GPU_BLOCKS[kind, 64 if head_dim <= 64 else 128], table_grads=TABLE_GRADS)


def _blocks(device: torch.device, head_dim: int, dtype: torch.dtype, blocks: Optional[dict]) -> dict:
    chosen = dict(INTERPRETER_BLOCKS) if device.type == "cpu" else gpu_blocks(head_dim, dtype)
    chosen.update(blocks or {})
    return chosen


def _tiles(cfg: dict, kernel: str):
    """(BLOCK_M, BLOCK_N, warps, stages) of ``kernel``; stages default to 2 (1 under the interpreter)."""
    tiles = tuple(cfg[kernel])
    return tiles if len(tiles) == 4 else tiles + (cfg.get("num_stages", 2),)


def _accumulator(dtype: torch.dtype):
    return (tl.float64, torch.float64) if dtype == torch.float64 else (tl.float32, torch.float32)


def _precision(dtype: torch.dtype) -> str:
    """float32 matmuls as torch does them: TF32 only where torch allows it for CUDA matmuls."""
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def launch_forward(q, k, v, bias, ctab, pad, out, row_max, row_sum, scale: float, cfg: dict,
                   dropout_p: float = 0.0, seed: Optional[torch.Tensor] = None) -> None:
    """Run the forward kernel: ``out`` (laid out like ``q``), ``row_max`` and ``row_sum`` ``(B * H, T)``.

    ``bias``, ``ctab`` ``(H, >= T)`` in the accumulator's dtype, ``pad`` ``(B, T)`` int8, or ``None``;
    ``seed`` a one-element int64 tensor when ``dropout_p > 0``.
    """
    batch, heads, length, head_dim = q.shape
    acc_tl, _ = _accumulator(q.dtype)
    dummy = row_max
    block_m, block_n, warps, stages = _tiles(cfg, "forward")
    _forward_kernel[(triton.cdiv(length, block_m), batch * heads)](
        q, k, v, _or(bias, dummy), _or(ctab, dummy), _or(pad, dummy), _or(seed, dummy), out, row_max, row_sum,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        _row_stride(bias), _row_stride(ctab), _row_stride(pad),
        heads, length, scale, float(dropout_p),
        HAS_BIAS=bias is not None, HAS_C=ctab is not None, HAS_PAD=pad is not None, HAS_DROPOUT=dropout_p > 0,
        D=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_block_d(head_dim),
        PRECISION=_precision(q.dtype), ACC=acc_tl, num_warps=warps, num_stages=stages,
    )


def launch_backward(q, k, v, bias, ctab, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c,
                    scale: float, cfg: dict, dropout_p: float = 0.0, seed: Optional[torch.Tensor] = None) -> None:
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
        heads, length, scale, float(dropout_p),
    )
    flags = dict(HAS_BIAS=bias is not None, HAS_C=ctab is not None, HAS_PAD=pad is not None,
                 HAS_DROPOUT=dropout_p > 0, D=head_dim, BLOCK_D=_block_d(head_dim), PRECISION=_precision(q.dtype),
                 ACC=acc_tl)
    inputs = (q, k, v, _or(bias, dummy), _or(ctab, dummy), _or(pad, dummy), _or(seed, dummy), grad_out,
              row_max, row_sum, delta)
    in_dq = cfg["table_grads"] == "dq"
    bias_grad, c_grad = d_bias is not None, d_c is not None
    block_m, block_n, warps, stages = _tiles(cfg, "dkdv")
    _backward_dkdv_kernel[(triton.cdiv(length, block_n), batch * heads)](
        *inputs, dk, dv, _or(d_bias, dummy), _or(d_c, dummy), *common,
        BIAS_GRAD=bias_grad and not in_dq, C_GRAD=c_grad and not in_dq,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages, **flags,
    )
    block_m, block_n, warps, stages = _tiles(cfg, "dq")
    _backward_dq_kernel[(triton.cdiv(length, block_m), batch * heads)](
        *inputs, dq, _or(d_bias, dummy), _or(d_c, dummy), *common,
        BIAS_GRAD=bias_grad and in_dq, C_GRAD=c_grad and in_dq,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages, **flags,
    )


def _or(x, default):
    return default if x is None else x


def _row_stride(x) -> int:
    return 0 if x is None else x.stride(0)


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


def attention_dropout_mask(seed: torch.Tensor, batch: int, heads: int, length: int, dropout_p: float) -> torch.Tensor:
    """``(B, H, T, T)`` float32: the kernels' ``Z`` for ``seed`` (``1 / (1 - p)`` kept, 0 dropped), on seed's device."""
    out = torch.empty(batch * heads, length, length, device=seed.device, dtype=torch.float32)
    block = 64
    _dropout_mask_kernel[(triton.cdiv(length, block), batch * heads)](seed, out, length, float(dropout_p), BLOCK=block)
    return out.view(batch, heads, length, length)


def new_dropout_seed(device: torch.device) -> torch.Tensor:
    """A one-element int64 seed drawn from torch's default generator of ``device`` (``--seed`` fixes it)."""
    return torch.randint(0, 2**62, (1,), device=device, dtype=torch.int64)


class FusedCausalURPEAttention(torch.autograd.Function):
    """Autograd wrapper of the Triton kernels; use :func:`fused_causal_urpe_attention`."""

    @staticmethod
    def forward(ctx, q, k, v, bias_by_distance, c_by_distance, key_padding_mask, scale, dropout_p, seed, blocks):
        batch, heads, length, head_dim = q.shape
        _, acc_torch = _accumulator(q.dtype)
        cfg = _blocks(q.device, head_dim, q.dtype, blocks)
        bias = bias_by_distance.to(acc_torch).contiguous() if bias_by_distance is not None else None
        ctab = c_by_distance.to(acc_torch).contiguous() if c_by_distance is not None else None
        pad = key_padding_mask.to(torch.int8).contiguous() if key_padding_mask is not None else None
        out = torch.empty_like(q)
        row_max = torch.empty(batch * heads, length, device=q.device, dtype=acc_torch)
        row_sum = torch.empty_like(row_max)
        launch_forward(q, k, v, bias, ctab, pad, out, row_max, row_sum, scale, cfg, dropout_p, seed)
        ctx.save_for_backward(q, k, v, out, bias, ctab, pad, row_max, row_sum, seed)
        ctx.table_dtypes = (
            bias_by_distance.dtype if bias_by_distance is not None else None,
            c_by_distance.dtype if c_by_distance is not None else None,
        )
        ctx.scale, ctx.cfg, ctx.dropout_p = scale, cfg, dropout_p
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, bias, ctab, pad, row_max, row_sum, seed = ctx.saved_tensors
        batch, heads, length, head_dim = q.shape
        _, acc_torch = _accumulator(q.dtype)
        delta = (grad_out.to(acc_torch) * out.to(acc_torch)).sum(-1).reshape(batch * heads, length)  # D_i
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        d_bias = torch.zeros_like(bias) if bias is not None and ctx.needs_input_grad[3] else None  # (H, >= T)
        d_c = torch.zeros_like(ctab) if ctab is not None and ctx.needs_input_grad[4] else None
        launch_backward(q, k, v, bias, ctab, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c,
                        ctx.scale, ctx.cfg, ctx.dropout_p, seed)
        bias_dtype, c_dtype = ctx.table_dtypes
        return (
            dq, dk, dv,
            d_bias.to(bias_dtype) if d_bias is not None else None,
            d_c.to(c_dtype) if d_c is not None else None,
            None, None, None, None, None,
        )


def fused_causal_urpe_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias_by_distance: Optional[torch.Tensor] = None,
    c_by_distance: Optional[torch.Tensor] = None,
    key_padding_mask: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    dropout_p: float = 0.0,
    dropout_seed: Optional[torch.Tensor] = None,
    blocks: Optional[dict] = None,
) -> torch.Tensor:
    """Causal ``dropout(softmax(scale Q K^T + B) ⊙ C) V`` without a ``T x T`` matrix, forward and backward.

    Args:
        q, k, v: ``(B, H, T, d)``, float16, bfloat16 or float32 (float64 under Triton's interpreter),
            any strides; ``d <= 128``.
        bias_by_distance: ``(H, >= T)``: ``B_ij = bias_by_distance[h, i - j]``, or ``None``.
        c_by_distance: ``(H, >= T)``: ``C_ij = c_by_distance[h, i - j]``, or ``None`` (``C = 1``).
        key_padding_mask: ``(B, T)`` bool, true at padded keys, or ``None``.
        scale: multiplies ``Q K^T``; default ``1 / sqrt(d)``.
        dropout_p: attention dropout on ``A ⊙ C`` (kept entries scaled by ``1 / (1 - p)``); ``T <= 131064``.
        dropout_seed: one-element int64 tensor on q's device choosing the mask (see
            :func:`attention_dropout_mask`); default: drawn from torch's generator (:func:`new_dropout_seed`).
        blocks: overrides of the tile choices (keys and values as in ``INTERPRETER_BLOCKS``; a tile's
            pipeline stages may be left out).

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
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1); got {dropout_p}")
    if dropout_p > 0 and length > MAX_DROPOUT_LENGTH:
        raise ValueError(f"attention dropout in the kernel supports T <= {MAX_DROPOUT_LENGTH}; got {length}")
    if length == 0:
        return torch.empty_like(q)
    seed = None
    if dropout_p > 0:
        seed = new_dropout_seed(q.device) if dropout_seed is None else dropout_seed.to(q.device, torch.int64).reshape(1)
    # Gradients are allocated like their inputs and written with the inputs' strides: make overlapping
    # or gapped views (e.g. expanded k, v) dense first.
    q, k, v = (x if torch.empty_like(x).stride() == x.stride() else x.contiguous() for x in (q, k, v))
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    return FusedCausalURPEAttention.apply(q, k, v, bias_by_distance, c_by_distance, key_padding_mask, scale,
                                          float(dropout_p), seed, blocks)
