"""Fused causal URPE attention in Triton: FlashAttention-2 with a relative bias and a Toeplitz reweighting.

    S_ij = scale * q_i . k_j + b(i - j)          keys j <= i; padded keys score float32's lowest value
    P    = softmax(S)  row-wise                  online: running row max m_i and row sum l_i, never T x T
    O    = dropout(P ⊙ C) V = (P ⊙ C ⊙ Z) V      C_ij = c(i - j) (c = 1: plain RPE attention);
                                                 Z_ij = keep_ij / (1 - p), Z = 1 without dropout

Backward, recomputing P (and Z) tile by tile from the stored m and l (O(T) extra memory):

    D_i = dO_i . O_i     dW = (dO V^T) ⊙ Z     dV = (P ⊙ C ⊙ Z)^T dO     dP = dW ⊙ C     dS = P ⊙ (dP - D_i)
    dQ  = scale dS K     dK = scale dS^T Q
    db(k) = sum over the diagonal i - j = k of dS       dc(k) = sum over i - j = k of dW ⊙ P

``b`` and ``c`` come per head as tables by distance, ``(H, n)``: entry k for distance k, and the last
entry for every distance past it (``B_ij = b[min(i - j, n - 1)]``), so a table that is constant from some
distance on (T5's buckets, a clipped table) is passed only up to there. Key tiles wholly at or past both
tables' last entries (*far* tiles: 77-84% of the tiles at T = 2048 with T5's default tables, 114 entries)
read one scalar per table and add their table gradients to one running scalar per table, one atomic per
program; without key padding the forward instead stores the far tiles' share of each row (``FarShare``,
``O(T d)``), from which the delta kernel adds those gradients, so dQ's far tiles do no table work
(``far_share_applies``), and where the tiles say so (``far_dq_fits``) the dK/dV kernel, which computes
dS on its far tiles anyway, adds their ``dS K`` to dQ by float32 atomics, as FlashAttention-2's backward
adds all of dQ, so the dQ kernel skips them. The other (*near*) tiles read their slice of each table with
one gather, and add per-diagonal sums. Padded keys
follow the dense attention in ``fairseq_urpe/modules/relative_multihead_attention.py``: their score is the most negative
finite float32 rather than -inf, so a query whose visible keys are all padding averages them uniformly
and stays finite, and no gradient flows into their scores. Attention dropout follows it too: applied to
``P ⊙ C``; its mask comes from Philox-4x32-7 (counter-based, one seed per call, 8 random bits per entry,
one call per 16 keys, 7 rounds, as FlashAttention-2 does), so the backward kernels regenerate it
instead of storing it. The rate run is ``round(256 p) / 256`` (refused where that is more than 10% from
``p``, :mod:`.dropout_rate`) and kept entries are scaled by the exact inverse of the keep probability,
``256 / (256 - round(256 p))``, so ``E[Z] = 1`` exactly (up to float32 rounding of the scale).

Softmax runs in base 2 (``exp2``, with ``log2(e)`` folded into the score scale and the bias); the row
maxima are stored in that base. Pointer bases (batch, head, the tile's first row) are int64, so tensors of
any size are addressed right; offsets inside a tile are int32 (inputs whose row stride would overflow them
are copied first). Each tile reads its slice of a table (``BLOCK_M + BLOCK_N - 1`` distances) with one
load and expands it in registers; tiles wholly below the diagonal skip the causal mask; the query tiles
with the most keys start first. This module imports only torch, triton and its sibling modules.
"""

import math
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from .dropout_rate import dropout_keep

PAD_SCORE = tl.constexpr(-3.4028234663852886e38)  # torch.finfo(torch.float32).min
LOG2E = 1.4426950408889634  # exp(x) = exp2(x log2(e))
MAX_HEAD_DIM = 128
PHILOX_ROUNDS = tl.constexpr(7)  # attention dropout's Philox-4x32 rounds: FlashAttention-2's (Random123's default: 10)
MAX_TILE = 128  # the most rows (keys) of a tile: in-tile offsets (MAX_TILE - 1) * row stride + d stay int32


@triton.jit
def _table_tile(TABLE, first, distance, LAST, L: tl.constexpr, M: tl.constexpr, N: tl.constexpr, factor=1.0):
    """The (M, N) tile ``factor * TABLE[min(distance, LAST)]`` (0 at negative distances), all distances
    within ``first .. first + L - 1``: one load of that slice (scaled there, L entries, not M N), expanded
    in registers by a gather."""
    d = first + tl.arange(0, L)
    entries = tl.load(TABLE + tl.minimum(d, LAST), mask=d >= 0, other=0.0) * factor  # (L,)
    return tl.reshape(tl.gather(entries, tl.reshape(distance - first, [M * N]), 0), [M, N])


@triton.jit
def _dropout_scale(seed, bh, rows, start_n, keep_threshold, keep_scale, M: tl.constexpr, N: tl.constexpr):
    """``Z`` (M, N) for queries ``rows`` and keys ``start_n .. start_n + N - 1`` of head ``bh``:
    ``keep_scale`` where attention dropout keeps an entry, 0 where it drops it (:func:`_dropout_keep`)."""
    return tl.where(_dropout_keep(seed, bh, rows, start_n, keep_threshold, M, N), keep_scale, 0.0)


@triton.jit
def _dropout_keep(seed, bh, rows, start_n, keep_threshold, M: tl.constexpr, N: tl.constexpr):
    """Whether attention dropout keeps entry (i, j) (M, N) for queries ``rows`` and keys ``start_n ..
    start_n + N - 1`` (a multiple of 16) of head ``bh``. The kernels apply ``keep_scale`` once per row
    (forward) or through ``C``'s scalar or table slice (backward), not per entry.

    One Philox-4x32-7 call (7 rounds, as FlashAttention-2's), counters ``(j // 16, i, bh, 0)`` under the
    call's seed, gives four 32-bit words: the 8-bit uniforms of 16 consecutive keys, key ``16 g + 4 w + b``
    in byte ``b`` (from the least significant) of word ``w``; an entry is kept when its uniform is at least
    ``keep_threshold`` (``round(256 p)``). Every kernel regenerates the same mask from the same counters.
    The words are spread over their keys before the bytes are taken apart, so that the layout change to
    the tile's (through shared memory) moves 4 words per call instead of 16 bytes.
    """
    G: tl.constexpr = N // 16
    c0 = (start_n // 16 + tl.arange(0, G))[None, :] + rows[:, None] * 0  # (M, G)
    c1 = rows[:, None] + c0 * 0
    zero = c0 * 0
    w0, w1, w2, w3 = tl.philox(seed, c0, c1, zero + bh, zero, PHILOX_ROUNDS)
    # (M, G, 2, 2): join stacks on a new last axis, so [a, b] = w_(2a + b)
    words = tl.join(tl.join(w0, w2), tl.join(w1, w3))
    # Byte b is kept when it is >= t, that is when the word shifted left by 24 - 8 b (byte b on top, the
    # bytes below it under it) is >= t * 2^24, unsigned: no shift right and mask per byte.
    shifts = (24 - tl.arange(0, 4) * 8).to(tl.uint32)
    on_top = words[:, :, :, :, None] << shifts[None, None, None, None, :]  # (M, G, 2, 2, 4)
    keep = on_top >= (keep_threshold.to(tl.uint32) << 24)
    return tl.reshape(keep, [M, N])


@triton.jit
def _z_scale(keep_scale, HAS_DROPOUT: tl.constexpr):
    """The scale of kept entries with dropout, in float32 as a GPU launch passes it (the interpreter keeps
    a Python float's 64 bits; the mask :func:`attention_dropout_mask` writes out holds float32); 1 (a
    constant) without."""
    if HAS_DROPOUT:
        return tl.cast(keep_scale, tl.float32)
    else:
        return 1.0


@triton.jit
def _c_times_keep_scale(CTAB, c_far, first, distance, LAST_C, keep_scale, HAS_C: tl.constexpr,
                        HAS_DROPOUT: tl.constexpr, FAR_TILE: tl.constexpr, SLICE: tl.constexpr, M: tl.constexpr,
                        N: tl.constexpr):
    """``C ⊙ keep_scale`` of a backward tile (M, N), for HAS_C or HAS_DROPOUT: the scalar ``c_far`` (which
    carries the scale already) on far tiles, else the table's slice scaled (``keep_scale`` alone without C)."""
    if FAR_TILE:
        return c_far
    elif HAS_C:
        return _table_tile(CTAB, first, distance, LAST_C, SLICE, M, N, _z_scale(keep_scale, HAS_DROPOUT))
    else:
        return _z_scale(keep_scale, HAS_DROPOUT)


@triton.jit
def _load_seed(SEED, HAS_DROPOUT: tl.constexpr):
    if HAS_DROPOUT:
        seed = tl.load(SEED)
    else:
        seed = 0
    return seed


@triton.jit
def _exp(x, EXP2: tl.constexpr):
    """``2^x`` (scores in base 2); ``e^x`` in float64, where the scores stay in base e (exact scales)."""
    if EXP2:
        return tl.exp2(x)
    else:
        return tl.exp(x)


@triton.jit
def _far_values(BIAS, CTAB, LAST_B, LAST_C, log2e, HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, ACC: tl.constexpr):
    """The tables' last entries, ``log2e b[LAST_B]`` and ``c[LAST_C]`` (scalars): B and C of every far tile."""
    b_far = 0.0
    c_far = 1.0
    if HAS_BIAS:
        b_far = tl.load(BIAS + LAST_B).to(ACC) * log2e
    if HAS_C:
        c_far = tl.load(CTAB + LAST_C).to(ACC)
    return b_far, c_far


@triton.jit
def _key_tile_ranges(start_m, FAR, BLOCK_N: tl.constexpr, FAR_M: tl.constexpr, FAR_N: tl.constexpr):
    """``(far, below)`` for the query tile at ``start_m``: key tiles before ``below`` lie wholly below the
    diagonal, those before ``far`` wholly at distances ``>= FAR``, decided on a grid of ``FAR_M x FAR_N``
    blocks (multiples of the tiles; the tiles themselves by default): keys before ``far`` are the whole
    ``FAR_N``-blocks with ``j <= q0 - FAR``, for ``q0`` the first row of the ``FAR_M``-block of ``start_m``,
    so every kernel that uses one grid runs the same (i, j) as far."""
    below = ((start_m + 1) // BLOCK_N) * BLOCK_N
    far = (tl.maximum((start_m // FAR_M) * FAR_M - FAR + 1, 0) // FAR_N) * FAR_N
    return far, below


@triton.jit
def _scores(q, k, TABLE, first, distance, LAST, b_far, qk_scale, log2e,
            HAS_BIAS: tl.constexpr, FAR_TILE: tl.constexpr, SLICE: tl.constexpr, M: tl.constexpr, N: tl.constexpr,
            PRECISION: tl.constexpr, ACC: tl.constexpr):
    """``log2(e) (scale q k^T + B)`` (M, N) of one tile (``log2e`` 1 where the scores stay in base e); a far
    tile's B is the scalar ``b_far`` (already times ``log2e``)."""
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * qk_scale
    if HAS_BIAS:
        if FAR_TILE:
            s += b_far
        else:
            s += _table_tile(TABLE, first, distance, LAST, SLICE, M, N, log2e)
    return s


@triton.jit
def _forward_tile(
    acc, m_i, l_i, q, K, V, BIAS, CTAB, PAD, seed, rows, offs_n, dims, start_m, start_n, bh,
    stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D: tl.constexpr, qk_scale, log2e,
    keep_threshold, keep_scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    CAUSAL_MASK: tl.constexpr, FAR_TILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SLICE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, EXP2: tl.constexpr,
):
    """One key tile of the forward's online softmax; ``CAUSAL_MASK`` only for tiles that cross the diagonal,
    ``FAR_TILE`` for tiles past both tables' last entries (scalar ``b_far``, ``c_far``). ``K``, ``V``,
    ``PAD`` point at this (batch, head)'s key 0, ``BIAS``, ``CTAB`` at its head's table."""
    cols = start_n + offs_n
    col_mask = (cols[:, None] < T) & (dims[None, :] < D)
    start = tl.cast(start_n, tl.int64)
    k = tl.load(K + start * stride_kt + offs_n[:, None] * stride_kt + dims[None, :] * stride_kd,
                mask=col_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
    v = tl.load(V + start * stride_vt + offs_n[:, None] * stride_vt + dims[None, :] * stride_vd,
                mask=col_mask, other=0.0)
    distance = rows[:, None] - cols[None, :]  # (BLOCK_M, BLOCK_N): i - j
    first = start_m - start_n - (BLOCK_N - 1)  # the tile's smallest distance
    s = _scores(q, k, BIAS, first, distance, LAST_B, b_far, qk_scale, log2e, HAS_BIAS, FAR_TILE, SLICE, BLOCK_M,
                BLOCK_N, PRECISION, ACC)
    if HAS_PAD:
        padded = tl.load(PAD + cols, mask=cols < T, other=1) != 0  # (BLOCK_N,)
        s = tl.where(padded[None, :], PAD_SCORE, s)
    if CAUSAL_MASK:  # for rows < T this also hides keys >= T; rows >= T are never stored
        s = tl.where(distance >= 0, s, float("-inf"))
    # Key 0 is visible to every row and comes first, so m_i is finite after the first tile.
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = _exp(m_i - m_new, EXP2)
    p = _exp(s - m_new[:, None], EXP2)
    l_i = l_i * alpha + tl.sum(p, 1)
    if HAS_C and not FAR_TILE:  # far tiles come first and share c_far: their sum is scaled once, after them
        p = p * _table_tile(CTAB, first, distance, LAST_C, SLICE, BLOCK_M, BLOCK_N)
    if HAS_DROPOUT:  # Z / keep_scale; the kernel scales the row's sum once
        p = tl.where(_dropout_keep(seed, bh, rows, start_n, keep_threshold, BLOCK_M, BLOCK_N), p, 0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION, out_dtype=ACC)
    return acc, m_new, l_i


@triton.jit
def _forward_kernel(
    Q, K, V, BIAS, CTAB, PAD, SEED, Out, RowMax, RowSum, FarOut, FarMax, FarSum,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_bias_h, stride_c_h, stride_pad_b,
    H, T, LAST_B, LAST_C, FAR, qk_scale, log2e, keep_threshold, keep_scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    FAR_SUMS: tl.constexpr,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr, EXP2: tl.constexpr,
):
    """One program: BLOCK_M queries of one (batch, head), streaming over keys 0 .. the diagonal (far tiles,
    then near ones, then those on the diagonal); the last query tiles (the most keys) first.

    ``FAR_SUMS``: also store, after the far tiles, their share of the row (for the table gradients of far
    tiles, which :func:`_delta_kernel` then adds): ``FarOut_i = sum_far e^(S_ij - m') Z_ij v_j / l'``
    ``(B * H, T, D)`` and the running ``m'``, ``l'`` at that point in ``FarMax``, ``FarSum``."""
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    bh = tl.program_id(1)
    b = tl.cast(bh // H, tl.int64)
    h = tl.cast(bh % H, tl.int64)
    seed = _load_seed(SEED, HAS_DROPOUT)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    rows = start_m + offs_m
    dims = tl.arange(0, BLOCK_D)
    row_mask = (rows[:, None] < T) & (dims[None, :] < D)
    first_row = tl.cast(start_m, tl.int64)
    q = tl.load(Q + b * stride_qb + h * stride_qh + first_row * stride_qt + offs_m[:, None] * stride_qt
                + dims[None, :] * stride_qd, mask=row_mask, other=0.0)  # (BLOCK_M, BLOCK_D)
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    BIAS += h * stride_bias_h
    CTAB += h * stride_c_h
    PAD += b * stride_pad_b
    SLICE: tl.constexpr = 2 * max(BLOCK_M, BLOCK_N)  # >= BLOCK_M + BLOCK_N - 1 distances, a power of 2

    b_far, c_far = _far_values(BIAS, CTAB, LAST_B, LAST_C, log2e, HAS_BIAS, HAS_C, ACC)

    m_i = tl.full([BLOCK_M], float("-inf"), ACC)  # running row max of S (base 2)
    l_i = tl.zeros([BLOCK_M], ACC)  # running row sum of exp(S - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], ACC)  # running (exp(S - m_i) ⊙ C ⊙ Z) V
    far, below = _key_tile_ranges(start_m, FAR, BLOCK_N, BLOCK_M, BLOCK_N)
    for start_n in range(0, far, BLOCK_N):
        acc, m_i, l_i = _forward_tile(
            acc, m_i, l_i, q, K, V, BIAS, CTAB, PAD, seed, rows, offs_n, dims, start_m, start_n, bh,
            stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e,
            keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, False, True,
            BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)
    if FAR_SUMS:
        far_rows = tl.cast(bh, tl.int64) * T + first_row
        row_factor = _z_scale(keep_scale, HAS_DROPOUT) / tl.where(l_i > 0, l_i, 1.0)  # (BLOCK_M,)
        tl.store(FarOut + far_rows * D + offs_m[:, None] * D + dims[None, :],
                 (acc * row_factor[:, None]).to(FarOut.dtype.element_ty), mask=row_mask)
        tl.store(FarMax + far_rows + offs_m, m_i, mask=rows < T)
        tl.store(FarSum + far_rows + offs_m, l_i, mask=rows < T)
    if HAS_C:
        acc = acc * c_far
    for start_n in range(far, below, BLOCK_N):
        acc, m_i, l_i = _forward_tile(
            acc, m_i, l_i, q, K, V, BIAS, CTAB, PAD, seed, rows, offs_n, dims, start_m, start_n, bh,
            stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e,
            keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, False, False,
            BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)
    for start_n in range(below, tl.minimum(start_m + BLOCK_M, T), BLOCK_N):
        acc, m_i, l_i = _forward_tile(
            acc, m_i, l_i, q, K, V, BIAS, CTAB, PAD, seed, rows, offs_n, dims, start_m, start_n, bh,
            stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e,
            keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, True, False,
            BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)

    out = acc / l_i[:, None]
    out = out * _z_scale(keep_scale, HAS_DROPOUT)
    tl.store(Out + b * stride_ob + h * stride_oh + first_row * stride_ot + offs_m[:, None] * stride_ot
             + dims[None, :] * stride_od, out.to(Out.dtype.element_ty), mask=row_mask)
    stats = tl.cast(bh, tl.int64) * T
    tl.store(RowMax + stats + rows, m_i, mask=rows < T)
    tl.store(RowSum + stats + rows, l_i, mask=rows < T)


@triton.jit
def _add_diagonal_sums(x, GRAD, base, LAST, A: tl.constexpr, B: tl.constexpr, SIGN: tl.constexpr, factor=1.0):
    """GRAD[min(k, LAST)] += ``factor`` times the sum of the (A, B) tile ``x`` along each diagonal: entry (a, b) is at
    distance ``k = base + SIGN * (a - b)``; only the A + B - 1 diagonals the tile holds, and only ``k >= 0``
    (distances past the table's last entry read that entry, so their sums go there).

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
    here = here * factor
    back = back * factor
    local = tl.arange(0, L)
    k = base + SIGN * local
    tl.atomic_add(GRAD + tl.minimum(k, LAST), here, mask=(local < A) & (k >= 0), sem="relaxed")
    k = base + SIGN * (local - L)
    tl.atomic_add(GRAD + tl.minimum(k, LAST), back, mask=(local > L - B) & (k >= 0), sem="relaxed")


@triton.jit
def _add_far_sum(GRAD, LAST, total):
    """GRAD[LAST] += ``total`` ((1, 1) or (1,)): the far tiles' gradient of the table's last entry, one atomic."""
    tl.atomic_add(GRAD + LAST + tl.arange(0, 1), tl.reshape(total, [1]), sem="relaxed")


@triton.jit
def _dkdv_tile(
    dk, dv, db_far, dc_far, k, v, Q, DO, FarDQ, RowMax, RowSum, Delta, BIAS, CTAB, DBIAS, DC, seed, padded, cols,
    offs_m, dims, start_m, start_n, bh, stride_qt, stride_qd, stride_dot, stride_dod,
    T, LAST_B, LAST_C, b_far, c_far, D: tl.constexpr, qk_scale, log2e, keep_threshold, keep_scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr, CAUSAL_MASK: tl.constexpr, FAR_TILE: tl.constexpr,
    FAR_DQ: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SLICE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
    EXP2: tl.constexpr,
):
    """One query tile of dK, dV, with keys as rows (transposed tiles, ``k q^T``: the products' M is BLOCK_N).
    ``Q``, ``DO`` point at this (batch, head)'s query 0, ``RowMax``, ``RowSum``, ``Delta`` at its row 0.
    A far tile (``FAR_TILE``) reads the scalar tables ``b_far``, ``c_far`` and adds its table gradients
    to the running ``db_far``, ``dc_far``."""
    rows = start_m + offs_m
    row_mask = (rows[:, None] < T) & (dims[None, :] < D)
    first_row = tl.cast(start_m, tl.int64)
    q = tl.load(Q + first_row * stride_qt + offs_m[:, None] * stride_qt + dims[None, :] * stride_qd,
                mask=row_mask, other=0.0)  # (BLOCK_M, BLOCK_D)
    do = tl.load(DO + first_row * stride_dot + offs_m[:, None] * stride_dot + dims[None, :] * stride_dod,
                 mask=row_mask, other=0.0)
    m = tl.load(RowMax + rows, mask=rows < T, other=float("inf"))  # rows >= T: P = 0
    l = tl.load(RowSum + rows, mask=rows < T, other=1.0)
    delta = tl.load(Delta + rows, mask=rows < T, other=0.0)
    distance = rows[None, :] - cols[:, None]  # (BLOCK_N, BLOCK_M): i - j
    first = start_m - start_n - (BLOCK_N - 1)
    s = _scores(k, q, BIAS, first, distance, LAST_B, b_far, qk_scale, log2e, HAS_BIAS, FAR_TILE, SLICE, BLOCK_N,
                BLOCK_M, PRECISION, ACC)  # S^T
    if HAS_PAD:
        s = tl.where(padded[:, None], PAD_SCORE, s)
    if CAUSAL_MASK:
        s = tl.where(distance >= 0, s, float("-inf"))
    p = _exp(s - m[None, :], EXP2) / l[None, :]  # P^T
    dw = tl.dot(v, tl.trans(do), input_precision=PRECISION, out_dtype=ACC)  # (dO V^T)^T
    w = p
    if HAS_DROPOUT:  # Z^T / keep_scale: the scale rides on c
        keep = tl.trans(_dropout_keep(seed, bh, rows, start_n, keep_threshold, BLOCK_M, BLOCK_N))
        dw = tl.where(keep, dw, 0.0)
        w = tl.where(keep, p, 0.0)
    if HAS_C or HAS_DROPOUT:
        c = _c_times_keep_scale(CTAB, c_far, first, distance, LAST_C, keep_scale, HAS_C, HAS_DROPOUT, FAR_TILE,
                                SLICE, BLOCK_N, BLOCK_M)
        w = w * c
        dp = dw * c
    else:
        dp = dw
    dv += tl.dot(w.to(do.dtype), do, input_precision=PRECISION, out_dtype=ACC)
    ds = p * (dp - delta[None, :])
    if HAS_PAD:
        ds = tl.where(padded[:, None], 0.0, ds)  # masked scores pass no gradient
    ds_in = ds.to(q.dtype)
    dk += tl.dot(ds_in, q, input_precision=PRECISION, out_dtype=ACC)
    if FAR_DQ and FAR_TILE:  # this tile's share of dQ, dS K (unscaled), added to the sum dQ's kernel reads
        # as (K^T dS^T)^T: the product's M is the head dim, 64 or more, as Hopper's wgmma wants
        dq = tl.trans(tl.dot(tl.trans(k), ds_in, input_precision=PRECISION, out_dtype=ACC))  # (BLOCK_M, BLOCK_D)
        tl.atomic_add(FarDQ + first_row * D + offs_m[:, None] * D + dims[None, :], dq, mask=row_mask, sem="relaxed")
    if BIAS_GRAD:
        if FAR_TILE:
            db_far += tl.sum(ds)
        else:
            _add_diagonal_sums(ds, DBIAS, start_m - start_n, LAST_B, BLOCK_N, BLOCK_M, -1)
    if C_GRAD:
        if FAR_TILE:
            dc_far += tl.sum(dw * p)
        else:
            _add_diagonal_sums(dw * p, DC, start_m - start_n, LAST_C, BLOCK_N, BLOCK_M, -1,
                               _z_scale(keep_scale, HAS_DROPOUT))
    return dk, dv, db_far, dc_far


@triton.jit
def _backward_dkdv_kernel(
    Q, K, V, BIAS, CTAB, PAD, SEED, DO, RowMax, RowSum, Delta, DK, DV, DBIAS, DC, FarDQ,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_bias_h, stride_c_h, stride_pad_b,
    H, T, LAST_B, LAST_C, FAR, qk_scale, log2e, keep_threshold, keep_scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr, FAR_BRANCH: tl.constexpr, FAR_DQ: tl.constexpr,
    FAR_M: tl.constexpr, FAR_N: tl.constexpr,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr, EXP2: tl.constexpr,
):
    """One program: BLOCK_N keys of one (batch, head), streaming over the queries that see them (those on
    the diagonal, then near ones, then far ones; the first key tiles, seen by the most queries, start first).

    Accumulates dK and dV in registers (and, when asked, adds the tiles' diagonal sums to the table
    gradients). dK, dV are laid out like K, V (same strides).

    ``FAR_DQ``: the far tiles are those on the grid ``FAR_M x FAR_N`` (``_key_tile_ranges``; the forward's
    far tiles or fewer), and each adds its ``dS K`` (unscaled) to ``FarDQ`` ``(B * H, T, D)`` by relaxed
    atomics, for the dQ kernel to read.
    """
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = tl.cast(bh // H, tl.int64)
    h = tl.cast(bh % H, tl.int64)
    seed = _load_seed(SEED, HAS_DROPOUT)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    cols = start_n + offs_n
    dims = tl.arange(0, BLOCK_D)
    col_mask = (cols[:, None] < T) & (dims[None, :] < D)
    first_col = tl.cast(start_n, tl.int64)
    k_offsets = b * stride_kb + h * stride_kh + first_col * stride_kt + offs_n[:, None] * stride_kt + dims[None, :] * stride_kd
    v_offsets = b * stride_vb + h * stride_vh + first_col * stride_vt + offs_n[:, None] * stride_vt + dims[None, :] * stride_vd
    k = tl.load(K + k_offsets, mask=col_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
    v = tl.load(V + v_offsets, mask=col_mask, other=0.0)
    if HAS_PAD:
        padded = tl.load(PAD + b * stride_pad_b + cols, mask=cols < T, other=1) != 0  # (BLOCK_N,)
    else:
        padded = cols < 0
    Q += b * stride_qb + h * stride_qh
    DO += b * stride_dob + h * stride_doh
    stats = tl.cast(bh, tl.int64) * T
    RowMax += stats
    RowSum += stats
    Delta += stats
    FarDQ += stats * D  # (B * H, T, D) in the accumulator's dtype
    BIAS += h * stride_bias_h
    CTAB += h * stride_c_h
    DBIAS += h * stride_bias_h
    DC += h * stride_c_h
    SLICE: tl.constexpr = 2 * max(BLOCK_M, BLOCK_N)
    b_far, c_far = _far_values(BIAS, CTAB, LAST_B, LAST_C, log2e, HAS_BIAS, HAS_C, ACC)
    c_far = c_far * _z_scale(keep_scale, HAS_DROPOUT)  # C ⊙ keep_scale of far tiles (dropout)
    db_far = tl.zeros([1, 1], ACC)  # the far tiles' gradients of b[LAST_B], c[LAST_C]
    dc_far = tl.zeros([1, 1], ACC)
    dk = tl.zeros([BLOCK_N, BLOCK_D], ACC)
    dv = tl.zeros([BLOCK_N, BLOCK_D], ACC)
    lo = (start_n // BLOCK_M) * BLOCK_M  # the first query tile that sees a key of this tile
    above = tl.cdiv(start_n + BLOCK_N - 1, BLOCK_M) * BLOCK_M  # query tiles from here on see every key of it
    if FAR_DQ:  # ... and the far ones: those within the far FAR_M x FAR_N blocks (_key_tile_ranges; far_dq_grid)
        far = tl.maximum(tl.cdiv((start_n // FAR_N + 1) * FAR_N + FAR - 1, FAR_M) * FAR_M, above)
    else:  # ... and from here on only at distances >= FAR (i - j >= FAR for every entry)
        far = tl.maximum(tl.cdiv(start_n + BLOCK_N - 1 + FAR, BLOCK_M) * BLOCK_M, above)
    for start_m in range(lo, tl.minimum(above, T), BLOCK_M):
        dk, dv, db_far, dc_far = _dkdv_tile(
            dk, dv, db_far, dc_far, k, v, Q, DO, FarDQ, RowMax, RowSum, Delta, BIAS, CTAB, DBIAS, DC,
            seed, padded, cols, offs_m, dims, start_m, start_n, bh, stride_qt, stride_qd, stride_dot,
            stride_dod, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale,
            HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD, True, False, FAR_DQ, BLOCK_M, BLOCK_N,
            SLICE, PRECISION, ACC, EXP2)
    if FAR_BRANCH:  # near and far tiles in one loop, by a uniform branch (fewer registers on some tiles)
        for start_m in range(above, T, BLOCK_M):
            if start_m < far:
                dk, dv, db_far, dc_far = _dkdv_tile(
                    dk, dv, db_far, dc_far, k, v, Q, DO, FarDQ, RowMax, RowSum, Delta, BIAS, CTAB, DBIAS, DC,
                    seed, padded, cols, offs_m, dims, start_m, start_n, bh, stride_qt, stride_qd, stride_dot,
                    stride_dod, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale,
                    HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD, False, False, FAR_DQ, BLOCK_M, BLOCK_N,
                    SLICE, PRECISION, ACC, EXP2)
            else:
                dk, dv, db_far, dc_far = _dkdv_tile(
                    dk, dv, db_far, dc_far, k, v, Q, DO, FarDQ, RowMax, RowSum, Delta, BIAS, CTAB, DBIAS, DC,
                    seed, padded, cols, offs_m, dims, start_m, start_n, bh, stride_qt, stride_qd, stride_dot,
                    stride_dod, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale,
                    HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD, False, True, FAR_DQ, BLOCK_M, BLOCK_N,
                    SLICE, PRECISION, ACC, EXP2)
    else:
        for start_m in range(above, tl.minimum(far, T), BLOCK_M):
            dk, dv, db_far, dc_far = _dkdv_tile(
                dk, dv, db_far, dc_far, k, v, Q, DO, FarDQ, RowMax, RowSum, Delta, BIAS, CTAB, DBIAS, DC,
                seed, padded, cols, offs_m, dims, start_m, start_n, bh, stride_qt, stride_qd, stride_dot,
                stride_dod, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale,
                HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD, False, False, FAR_DQ, BLOCK_M, BLOCK_N,
                SLICE, PRECISION, ACC, EXP2)
        for start_m in range(far, T, BLOCK_M):
            dk, dv, db_far, dc_far = _dkdv_tile(
                dk, dv, db_far, dc_far, k, v, Q, DO, FarDQ, RowMax, RowSum, Delta, BIAS, CTAB, DBIAS, DC,
                seed, padded, cols, offs_m, dims, start_m, start_n, bh, stride_qt, stride_qd, stride_dot,
                stride_dod, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale,
                HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD, False, True, FAR_DQ, BLOCK_M, BLOCK_N,
                SLICE, PRECISION, ACC, EXP2)
    if BIAS_GRAD:
        _add_far_sum(DBIAS, LAST_B, db_far)
    if C_GRAD:
        _add_far_sum(DC, LAST_C, dc_far * _z_scale(keep_scale, HAS_DROPOUT))
    dk *= qk_scale / log2e  # scale
    tl.store(DK + k_offsets, dk.to(DK.dtype.element_ty), mask=col_mask)
    tl.store(DV + v_offsets, dv.to(DV.dtype.element_ty), mask=col_mask)


@triton.jit
def _dq_tile(
    dq, db_far, dc_far, q, do, m, l, delta, K, V, BIAS, CTAB, PAD, DBIAS, DC, seed, rows, offs_n, dims, start_m,
    start_n, bh, stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D: tl.constexpr,
    qk_scale, log2e, keep_threshold, keep_scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr, CAUSAL_MASK: tl.constexpr, FAR_TILE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SLICE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
    EXP2: tl.constexpr,
):
    """One key tile of dQ (and, when asked, of the table gradients; a far tile adds them to the running
    ``db_far``, ``dc_far``)."""
    cols = start_n + offs_n
    col_mask = (cols[:, None] < T) & (dims[None, :] < D)
    start = tl.cast(start_n, tl.int64)
    k = tl.load(K + start * stride_kt + offs_n[:, None] * stride_kt + dims[None, :] * stride_kd, mask=col_mask, other=0.0)
    v = tl.load(V + start * stride_vt + offs_n[:, None] * stride_vt + dims[None, :] * stride_vd, mask=col_mask, other=0.0)
    distance = rows[:, None] - cols[None, :]  # (BLOCK_M, BLOCK_N): i - j
    first = start_m - start_n - (BLOCK_N - 1)
    s = _scores(q, k, BIAS, first, distance, LAST_B, b_far, qk_scale, log2e, HAS_BIAS, FAR_TILE, SLICE, BLOCK_M,
                BLOCK_N, PRECISION, ACC)
    if HAS_PAD:
        padded = tl.load(PAD + cols, mask=cols < T, other=1) != 0
        s = tl.where(padded[None, :], PAD_SCORE, s)
    if CAUSAL_MASK:
        s = tl.where(distance >= 0, s, float("-inf"))
    p = _exp(s - m[:, None], EXP2) / l[:, None]
    dw = tl.dot(do, tl.trans(v), input_precision=PRECISION, out_dtype=ACC)
    if HAS_DROPOUT:  # Z / keep_scale: the scale rides on c
        dw = tl.where(_dropout_keep(seed, bh, rows, start_n, keep_threshold, BLOCK_M, BLOCK_N), dw, 0.0)
    if HAS_C or HAS_DROPOUT:
        dp = dw * _c_times_keep_scale(CTAB, c_far, first, distance, LAST_C, keep_scale, HAS_C, HAS_DROPOUT,
                                      FAR_TILE, SLICE, BLOCK_M, BLOCK_N)
    else:
        dp = dw
    ds = p * (dp - delta[:, None])
    if HAS_PAD:
        ds = tl.where(padded[None, :], 0.0, ds)  # masked scores pass no gradient
    dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION, out_dtype=ACC)
    if BIAS_GRAD:
        if FAR_TILE:
            db_far += tl.sum(ds)
        else:
            _add_diagonal_sums(ds, DBIAS, start_m - start_n, LAST_B, BLOCK_M, BLOCK_N, 1)
    if C_GRAD:
        if FAR_TILE:
            dc_far += tl.sum(dw * p)
        else:
            _add_diagonal_sums(dw * p, DC, start_m - start_n, LAST_C, BLOCK_M, BLOCK_N, 1,
                               _z_scale(keep_scale, HAS_DROPOUT))
    return dq, db_far, dc_far


@triton.jit
def _backward_dq_kernel(
    Q, K, V, BIAS, CTAB, PAD, SEED, DO, RowMax, RowSum, Delta, DQ, DBIAS, DC, FarDQ,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_bias_h, stride_c_h, stride_pad_b,
    H, T, LAST_B, LAST_C, FAR, qk_scale, log2e, keep_threshold, keep_scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr, FAR_SUMS: tl.constexpr, FAR_DQ: tl.constexpr,
    FAR_M: tl.constexpr, FAR_N: tl.constexpr, DQ_FAR_N: tl.constexpr,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr, EXP2: tl.constexpr,
):
    """One program: dQ for BLOCK_M queries of one (batch, head), the last (most keys) first; dQ is laid
    out like Q.

    ``FAR_SUMS``: the far tiles are the forward's (its tiles ``FAR_M`` x ``FAR_N``, multiples of these),
    and their table gradients come from the delta kernel, so they add none here. ``FAR_DQ``: the dK/dV
    kernel has added the dQ of the far tiles on the grid ``FAR_M x DQ_FAR_N`` to ``FarDQ``; this kernel
    runs the forward's other far tiles and adds ``FarDQ``'s rows."""
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    bh = tl.program_id(1)
    b = tl.cast(bh // H, tl.int64)
    h = tl.cast(bh % H, tl.int64)
    seed = _load_seed(SEED, HAS_DROPOUT)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    rows = start_m + offs_m
    dims = tl.arange(0, BLOCK_D)
    row_mask = (rows[:, None] < T) & (dims[None, :] < D)
    first_row = tl.cast(start_m, tl.int64)
    q_offsets = b * stride_qb + h * stride_qh + first_row * stride_qt + offs_m[:, None] * stride_qt + dims[None, :] * stride_qd
    q = tl.load(Q + q_offsets, mask=row_mask, other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + first_row * stride_dot + offs_m[:, None] * stride_dot
                 + dims[None, :] * stride_dod, mask=row_mask, other=0.0)
    stats = tl.cast(bh, tl.int64) * T
    m = tl.load(RowMax + stats + rows, mask=rows < T, other=float("inf"))  # rows >= T: P = 0
    l = tl.load(RowSum + stats + rows, mask=rows < T, other=1.0)
    delta = tl.load(Delta + stats + rows, mask=rows < T, other=0.0)
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    PAD += b * stride_pad_b
    BIAS += h * stride_bias_h
    CTAB += h * stride_c_h
    DBIAS += h * stride_bias_h
    DC += h * stride_c_h
    SLICE: tl.constexpr = 2 * max(BLOCK_M, BLOCK_N)
    b_far, c_far = _far_values(BIAS, CTAB, LAST_B, LAST_C, log2e, HAS_BIAS, HAS_C, ACC)
    c_far = c_far * _z_scale(keep_scale, HAS_DROPOUT)  # C ⊙ keep_scale of far tiles (dropout)
    db_far = tl.zeros([1, 1], ACC)  # the far tiles' gradients of b[LAST_B], c[LAST_C]
    dc_far = tl.zeros([1, 1], ACC)
    dq = tl.zeros([BLOCK_M, BLOCK_D], ACC)
    far, below = _key_tile_ranges(start_m, FAR, BLOCK_N, FAR_M, FAR_N)
    first_far = 0
    if FAR_DQ:  # the keys before here: the dK/dV kernel has added their dQ to FarDQ
        first_far = _key_tile_ranges(start_m, FAR, BLOCK_N, FAR_M, DQ_FAR_N)[0]
    for start_n in range(first_far, far, BLOCK_N):
        dq, db_far, dc_far = _dq_tile(
            dq, db_far, dc_far, q, do, m, l, delta, K, V, BIAS, CTAB, PAD, DBIAS, DC, seed, rows, offs_n, dims,
            start_m, start_n, bh, stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D,
            qk_scale, log2e, keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT,
            BIAS_GRAD and not FAR_SUMS, C_GRAD and not FAR_SUMS, False, True, BLOCK_M, BLOCK_N, SLICE, PRECISION,
            ACC, EXP2)
    for start_n in range(far, below, BLOCK_N):
        dq, db_far, dc_far = _dq_tile(
            dq, db_far, dc_far, q, do, m, l, delta, K, V, BIAS, CTAB, PAD, DBIAS, DC, seed, rows, offs_n, dims,
            start_m, start_n, bh, stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D,
            qk_scale, log2e, keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD,
            False, False, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)
    for start_n in range(below, tl.minimum(start_m + BLOCK_M, T), BLOCK_N):
        dq, db_far, dc_far = _dq_tile(
            dq, db_far, dc_far, q, do, m, l, delta, K, V, BIAS, CTAB, PAD, DBIAS, DC, seed, rows, offs_n, dims,
            start_m, start_n, bh, stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D,
            qk_scale, log2e, keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, BIAS_GRAD, C_GRAD,
            True, False, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)
    if BIAS_GRAD and not FAR_SUMS:
        _add_far_sum(DBIAS, LAST_B, db_far)
    if C_GRAD and not FAR_SUMS:
        _add_far_sum(DC, LAST_C, dc_far * _z_scale(keep_scale, HAS_DROPOUT))
    if FAR_DQ:
        dq += tl.load(FarDQ + (stats + first_row) * D + offs_m[:, None] * D + dims[None, :], mask=row_mask,
                      other=0.0)
    dq *= qk_scale / log2e  # scale
    tl.store(DQ + q_offsets, dq.to(DQ.dtype.element_ty), mask=row_mask)


@triton.jit
def _delta_kernel(O, DO, Delta, FarOut, FarMax, FarSum, RowMax, RowSum, CTAB, DBIAS, DC,
                  stride_ob, stride_oh, stride_ot, stride_od,
                  stride_dob, stride_doh, stride_dot, stride_dod, stride_bias_h, stride_c_h, H, T, LAST_B, LAST_C,
                  HAS_C: tl.constexpr, FAR_SUMS: tl.constexpr, BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr,
                  D: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr,
                  EXP2: tl.constexpr):
    """``Delta[bh, i] = dO_i . O_i`` for BLOCK rows of one (batch, head), in the accumulator's dtype.

    ``FAR_SUMS``: also the table gradients of the far tiles (which the dQ kernel then skips), from the
    forward's far share: with ``P^far_i = FarSum_i e^(FarMax_i - m_i) / l_i`` (the row's softmax mass on
    its far keys) and ``a_i = P^far_i dO_i . FarOut_i`` (= sum over far j of ``P_ij Z_ij dO_i . v_j``),
    ``dc(last) += sum_i a_i`` and ``db(last) += sum_i (c(last) a_i - D_i P^far_i)``: one atomic per table.
    """
    start = tl.program_id(0) * BLOCK
    bh = tl.program_id(1)
    b = tl.cast(bh // H, tl.int64)
    h = tl.cast(bh % H, tl.int64)
    offs = tl.arange(0, BLOCK)
    dims = tl.arange(0, BLOCK_D)
    rows = start + offs
    mask = (rows[:, None] < T) & (dims[None, :] < D)
    first = tl.cast(start, tl.int64)
    o = tl.load(O + b * stride_ob + h * stride_oh + first * stride_ot + offs[:, None] * stride_ot
                + dims[None, :] * stride_od, mask=mask, other=0.0).to(ACC)
    do = tl.load(DO + b * stride_dob + h * stride_doh + first * stride_dot + offs[:, None] * stride_dot
                 + dims[None, :] * stride_dod, mask=mask, other=0.0).to(ACC)
    delta = tl.sum(o * do, 1)
    stats = tl.cast(bh, tl.int64) * T
    tl.store(Delta + stats + rows, delta, mask=rows < T)
    if FAR_SUMS:
        g = tl.load(FarOut + (stats + first) * D + offs[:, None] * D + dims[None, :], mask=mask, other=0.0).to(ACC)
        far_max = tl.load(FarMax + stats + rows, mask=rows < T, other=float("-inf"))
        far_sum = tl.load(FarSum + stats + rows, mask=rows < T, other=0.0)
        m = tl.load(RowMax + stats + rows, mask=rows < T, other=0.0)
        l = tl.load(RowSum + stats + rows, mask=rows < T, other=1.0)
        p_far = far_sum * _exp(far_max - m, EXP2) / l  # (BLOCK,): 0 where a row has no far keys
        a = p_far * tl.sum(do * g, 1)
        if C_GRAD:
            _add_far_sum(DC + h * stride_c_h, LAST_C, tl.sum(a, 0, keep_dims=True))
        if BIAS_GRAD:
            c_far = 1.0
            if HAS_C:
                c_far = tl.load(CTAB + h * stride_c_h + LAST_C).to(ACC)
            _add_far_sum(DBIAS + h * stride_bias_h, LAST_B, tl.sum(c_far * a - delta * p_far, 0, keep_dims=True))


@triton.jit
def _dropout_mask_kernel(SEED, Out, T, keep_threshold, keep_scale, BLOCK: tl.constexpr):
    """``Out[bh, i, j] = Z_ij`` of head ``bh``: the kernels' dropout scale, written out (for tests)."""
    bh = tl.program_id(1)
    seed = tl.load(SEED)
    offs = tl.arange(0, BLOCK)
    start_m = tl.program_id(0) * BLOCK
    rows = start_m + offs
    Out += tl.cast(bh, tl.int64) * T * T + tl.cast(start_m, tl.int64) * T  # this head's first row of the block
    for start_n in range(0, T, BLOCK):
        cols = start_n + offs
        z = _dropout_scale(seed, bh, rows, start_n, keep_threshold, keep_scale, BLOCK, BLOCK)
        tl.store(Out + offs[:, None] * T + cols[None, :], z, mask=(rows[:, None] < T) & (cols[None, :] < T))


# Tiles (BLOCK_M queries, BLOCK_N keys, warps, pipeline stages) of the three kernels per architecture
# (sm_90: H100/H200; sm_80: A100, 163 KB of shared memory per block; sm_86: sm_86/87/89 and older, 99 KB),
# kind of product (16-bit, TF32 or full float32) and head dim (<= 64 or wider). Chosen on a machine without
# a GPU with python -m benchmarks.fused_kernel --compile-check (all tables and padding on, with and without
# dropout): the largest tiles that ptxas compiles without register spills under both tested tritons
# (3.7.1, 3.9.0), with wgmma on sm_90 wherever there are tensor cores to use. The dK/dV tile holds 32 to
# 128 keys; its query step is 16 at head dim 128 (32 spills on sm_90). dK/dV runs its near and far
# tiles in two loops ("far_branch": True puts them in one loop with a branch, which spilled less before
# round 4's dropout). dQ's tiles divide the forward's (the far share needs it). 16-bit is checked on
# every architecture (sm_86 takes smaller dK/dV tiles than sm_80's, which spill there); TF32 and float32
# (not what training runs) on sm_90 only: TF32 at head dim 128 spills a little in dK/dV with any tile
# that keeps wgmma. "far_dq": "dkdv" (where the far share applies, far_dq_fits): dK/dV's far tiles add
# their dQ by atomics and dQ's kernel skips them; set where that compiles without spills under both
# tritons (without padding, the only case it runs in) and the compile report prices it below dQ's far
# loop (sm_80/86 at head dim 128 spill with it). Untimed: python -m benchmarks.fused_kernel --blocks
# tries others on a GPU.
GPU_BLOCKS = {
    ("sm_90", "16-bit", 64): dict(forward=(128, 64, 8, 2), dkdv=(32, 128, 8, 2), dq=(64, 32, 4, 2), far_dq="dkdv"),
    ("sm_90", "16-bit", 128): dict(forward=(128, 32, 8, 2), dkdv=(16, 64, 8, 2), dq=(64, 16, 4, 2), far_dq="dkdv"),
    ("sm_80", "16-bit", 64): dict(forward=(128, 32, 8, 2), dkdv=(16, 128, 8, 2), dq=(128, 16, 8, 2), far_dq="dkdv"),
    ("sm_80", "16-bit", 128): dict(forward=(64, 32, 8, 2), dkdv=(16, 32, 8, 2), dq=(16, 32, 4, 1)),
    ("sm_86", "16-bit", 64): dict(forward=(128, 32, 8, 2), dkdv=(16, 64, 8, 2), dq=(128, 16, 8, 2), far_dq="dkdv"),
    ("sm_86", "16-bit", 128): dict(forward=(64, 32, 8, 2), dkdv=(16, 32, 8, 2), dq=(16, 32, 4, 1)),
    ("sm_90", "tf32", 64): dict(forward=(128, 32, 8, 2), dkdv=(16, 64, 8, 2), dq=(128, 32, 8, 2)),
    ("sm_90", "tf32", 128): dict(forward=(128, 32, 8, 2), dkdv=(32, 64, 8, 2), dq=(64, 16, 8, 2)),
    ("sm_90", "float32", 64): dict(forward=(32, 32, 4, 2), dkdv=(16, 32, 4, 2), dq=(64, 32, 8, 2)),  # no tensor cores
    ("sm_90", "float32", 128): dict(forward=(32, 16, 4, 2), dkdv=(16, 32, 4, 2), dq=(32, 16, 4, 2)),
}
TABLE_GRADS = "dq"
# Under the interpreter: small tiles, both shapes of dK/dQ tiles, so tests exercise both shears; dQ's
# tiles divide the forward's, so that the far share (far_share_applies) runs by default.
INTERPRETER_BLOCKS = dict(forward=(32, 16, 1, 1), dkdv=(16, 32, 1, 1), dq=(32, 16, 1, 1), table_grads="dq",
                          far_dq="dkdv")


def architecture(capability) -> str:
    """The tile table's architecture for a compute capability ``(major, minor)``: sm_90 from Hopper on,
    sm_80 for the A100's 8.0, sm_86 (99 KB of shared memory per block, or less) otherwise."""
    if tuple(capability) >= (9, 0):
        return "sm_90"
    return "sm_80" if tuple(capability) == (8, 0) else "sm_86"


def gpu_blocks(head_dim: int, dtype: torch.dtype, precision: Optional[str] = None, capability=None) -> dict:
    """The tiles the kernels use on a GPU of ``capability`` (default: the current device's, or sm_90 where
    there is none) for this head dim and dtype (float32: TF32 products where torch allows them now, or as
    ``precision``, "tf32" or "ieee", says)."""
    precision = precision or _precision(dtype)
    kind = {"tf32": "tf32", "ieee": "float32"}[precision] if dtype == torch.float32 else "16-bit"
    if capability is None:
        capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    arch = architecture(capability)
    width = 64 if head_dim <= 64 else 128
    tiles = GPU_BLOCKS.get((arch, kind, width), GPU_BLOCKS["sm_90", kind, width])
    return dict({"far_dq": "dq", **tiles}, table_grads=TABLE_GRADS)


def _blocks(device: torch.device, head_dim: int, dtype: torch.dtype, blocks: Optional[dict]) -> dict:
    if device.type == "cpu":
        chosen = dict(INTERPRETER_BLOCKS)
    else:
        chosen = gpu_blocks(head_dim, dtype, capability=torch.cuda.get_device_capability(device))
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


def _scores_base(dtype: torch.dtype):
    """(EXP2, log2e): base-2 softmax with log2(e) folded into the scale, except in float64 (base e, so
    that float64 runs hold the exact scale)."""
    return (False, 1.0) if dtype == torch.float64 else (True, LOG2E)


class FarShare(NamedTuple):
    """The far tiles' share of each row, stored by the forward for the far table gradients (see
    :func:`far_share_applies`): ``out`` ``(B * H, T, d)`` in q's dtype, ``row_max``, ``row_sum``
    ``(B * H, T)`` in the accumulator's."""

    out: torch.Tensor
    row_max: torch.Tensor
    row_sum: torch.Tensor

    @staticmethod
    def empty(q: torch.Tensor, row_max: torch.Tensor) -> "FarShare":
        batch, heads, length, head_dim = q.shape
        out = q.new_empty(batch * heads, length, head_dim)
        return FarShare(out, torch.empty_like(row_max), torch.empty_like(row_max))


def far_dq_fits(cfg: dict) -> bool:
    """Whether tiles ``cfg`` ask for the far tiles' dQ in the dK/dV kernel (``far_dq="dkdv"``) and allow
    it: dK/dV's query tiles divide the forward's. Used where the far share is (:func:`far_share_applies`):
    the dK/dV kernel, which computes dS on the far tiles anyway, adds ``dS K`` to a float32 sum by relaxed
    atomics, so dQ's kernel skips its far tiles (there, most of its work) and reads the sum."""
    return cfg.get("far_dq", "dq") == "dkdv" and _tiles(cfg, "forward")[0] % _tiles(cfg, "dkdv")[0] == 0


def far_dq_grid(cfg: dict):
    """``(FAR_M, FAR_N)``: the blocks of the far tiles whose dQ the dK/dV kernel adds (:func:`far_dq_fits`):
    the forward's query tiles by whole dK/dV key tiles, ``FAR_N = lcm`` of the forward's and dK/dV's
    BLOCK_N. Those blocks lie within the forward's far tiles (``_key_tile_ranges``), so the dQ kernel runs
    the forward's far tiles past them."""
    (fm, fn), kn = _tiles(cfg, "forward")[:2], _tiles(cfg, "dkdv")[1]
    return fm, math.lcm(fn, kn)


def far_flags(cfg: dict, far_share: bool) -> dict:
    """The backward kernels' far-tile constexprs under tiles ``cfg``, with or without the forward's far
    share: ``{"dkdv": FAR_DQ, FAR_M, FAR_N; "dq": FAR_SUMS, FAR_DQ, FAR_M, FAR_N, DQ_FAR_N}``. dQ's far
    tiles are the forward's with the far share (its own otherwise), dK/dV's those on :func:`far_dq_grid`
    where :func:`far_dq_fits` (FAR_M, FAR_N unused otherwise)."""
    far_dq = far_share and far_dq_fits(cfg)
    far_m, far_n = _tiles(cfg, "forward" if far_share else "dq")[:2]
    dq_far_m, dq_far_n = far_dq_grid(cfg) if far_dq else (far_m, far_n)
    return {"dkdv": dict(FAR_DQ=far_dq, FAR_M=dq_far_m, FAR_N=dq_far_n),
            "dq": dict(FAR_SUMS=far_share, FAR_DQ=far_dq, FAR_M=far_m, FAR_N=far_n, DQ_FAR_N=dq_far_n)}


def far_share_fits(cfg: dict, tables: bool, padding: bool) -> bool:
    """Whether the far share gives the right far table gradients under tiles ``cfg``: with a table, no key
    padding (a padded key is in P's far share but passes no bias gradient), table gradients in the dQ
    kernel, and dQ tiles that divide the forward's (so that both see the same keys as far)."""
    (fm, fn), (qm, qn) = _tiles(cfg, "forward")[:2], _tiles(cfg, "dq")[:2]
    return tables and not padding and cfg["table_grads"] == "dq" and fm % qm == 0 and fn % qn == 0


def far_share_applies(cfg: dict, length: int, bias=None, ctab=None, pad=None) -> bool:
    """Whether the far tiles' table gradients come from the forward's far share (:class:`FarShare`, added
    by the delta kernel) instead of sums inside the dQ kernel's far loop: where it fits
    (:func:`far_share_fits`) and the call has far tiles at all."""
    if not far_share_fits(cfg, bias is not None or ctab is not None, pad is not None):
        return False
    fm, fn = _tiles(cfg, "forward")[:2]
    return far_tiles("forward", length, table_reach(length, bias, ctab)[2], fm, fn) > 0


def _uses_far_share(cfg: dict, length: int, bias, ctab, pad, tables_learn: bool) -> bool:
    """Whether the forward stores the far share (``FAR_SUMS``): table gradients wanted and
    :func:`far_share_applies`."""
    return tables_learn and far_share_applies(cfg, length, bias, ctab, pad)


def launch_variant(q, bias_table=None, c_table=None, key_padding_mask=None, tables_learn=False, blocks=None) -> tuple:
    """The constexprs that the call's sizes (not its configuration) select: the forward's ``FAR_SUMS``
    and the backward's far-tile constexprs (:func:`far_flags`), as the launches of this call pass them."""
    cfg = _blocks(q.device, q.size(3), q.dtype, blocks)
    far_share = _uses_far_share(cfg, q.size(2), bias_table, c_table, key_padding_mask, tables_learn)
    flags = far_flags(cfg, far_share)
    return (("forward", far_share), *((name, tuple(sorted(flags[name].items()))) for name in ("dkdv", "dq")))


def launch_forward(q, k, v, bias, ctab, pad, out, row_max, row_sum, scale: float, cfg: dict,
                   dropout_p: float = 0.0, seed: Optional[torch.Tensor] = None,
                   far: Optional[FarShare] = None) -> None:
    """Run the forward kernel: ``out`` (laid out like ``q``), ``row_max`` (in base 2, except float64) and
    ``row_sum`` ``(B * H, T)``; and the far tiles' share into ``far`` where given.

    ``bias``, ``ctab`` ``(H, n)`` (module doc) in the accumulator's dtype, ``pad`` ``(B, T)`` int8, or ``None``;
    ``seed`` a one-element int64 tensor when ``dropout_p > 0``.
    """
    batch, heads, length, head_dim = q.shape
    acc_tl, _ = _accumulator(q.dtype)
    exp2, log2e = _scores_base(q.dtype)
    threshold, keep_scale = dropout_keep(dropout_p)
    dummy = row_max
    block_m, block_n, warps, stages = _tiles(cfg, "forward")
    _forward_kernel[(triton.cdiv(length, block_m), batch * heads)](
        q, k, v, _or(bias, dummy), _or(ctab, dummy), _or(pad, dummy), _or(seed, dummy), out, row_max, row_sum,
        *(far or (dummy, dummy, dummy)),
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        _row_stride(bias), _row_stride(ctab), _row_stride(pad),
        heads, length, *table_reach(length, bias, ctab), scale * log2e, log2e, threshold, keep_scale,
        HAS_BIAS=bias is not None, HAS_C=ctab is not None, HAS_PAD=pad is not None, HAS_DROPOUT=dropout_p > 0,
        FAR_SUMS=far is not None, D=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_block_d(head_dim),
        PRECISION=_precision(q.dtype), ACC=acc_tl, EXP2=exp2, num_warps=warps, num_stages=stages,
    )


def launch_delta(out, grad_out, delta, far: Optional[FarShare] = None, row_max=None, row_sum=None, bias=None,
                 ctab=None, d_bias=None, d_c=None) -> None:
    """``delta`` ``(B * H, T)`` in the accumulator's dtype: ``D_i = dO_i . O_i``; with ``far`` (the
    forward's), also add the far tiles' table gradients into ``d_bias``, ``d_c`` (those wanted), which
    :func:`launch_backward` given the same ``far`` then leaves out."""
    batch, heads, length, head_dim = out.shape
    acc_tl, _ = _accumulator(out.dtype)
    exp2, _ = _scores_base(out.dtype)
    block = 16 if out.device.type == "cpu" else 64
    dummy = delta
    last_b, last_c, _ = table_reach(length, bias, ctab)
    _delta_kernel[(triton.cdiv(length, block), batch * heads)](
        out, grad_out, delta, *(far or (dummy, dummy, dummy)), _or(row_max, dummy), _or(row_sum, dummy),
        _or(ctab, dummy), _or(d_bias, dummy), _or(d_c, dummy),
        *out.stride(), *grad_out.stride(), _row_stride(bias), _row_stride(ctab), heads, length, last_b, last_c,
        HAS_C=ctab is not None, FAR_SUMS=far is not None, BIAS_GRAD=far is not None and d_bias is not None,
        C_GRAD=far is not None and d_c is not None,
        D=head_dim, BLOCK=block, BLOCK_D=_block_d(head_dim), ACC=acc_tl, EXP2=exp2, num_warps=4 if block > 16 else 1,
    )


def launch_backward(q, k, v, bias, ctab, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c,
                    scale: float, cfg: dict, dropout_p: float = 0.0, seed: Optional[torch.Tensor] = None,
                    far: Optional[FarShare] = None, far_dq_sum: Optional[torch.Tensor] = None) -> None:
    """Run the two backward kernels: ``dq``, ``dk``, ``dv`` (laid out like q, k, v), and add the table
    gradients into ``d_bias``, ``d_c`` (zeroed, laid out like ``bias``, ``ctab``; ``None``: not wanted).

    ``delta`` ``(B * H, T)``: ``D_i = dO_i . O_i`` (:func:`launch_delta`). With ``far`` (the forward's, and
    given to :func:`launch_delta`, which added the far tiles' table gradients) the dQ kernel adds only the
    near tiles'; and where :func:`far_dq_fits`, the dK/dV kernel adds the far tiles' dQ (on
    :func:`far_dq_grid`) to ``far_dq_sum``, a zeroed ``(B * H, T, d)`` tensor in the accumulator's dtype
    (allocated here if not given), which the dQ kernel reads instead of running those tiles.
    """
    batch, heads, length, head_dim = q.shape
    acc_tl, _ = _accumulator(q.dtype)
    exp2, log2e = _scores_base(q.dtype)
    threshold, keep_scale = dropout_keep(dropout_p)
    dummy = row_max
    if dk.stride() != k.stride() or dv.stride() != v.stride() or dq.stride() != q.stride():
        raise ValueError("dq, dk, dv must be laid out like q, k, v: the kernels reuse the strides")
    common = (
        *q.stride(), *k.stride(), *v.stride(), *grad_out.stride(),
        _row_stride(bias), _row_stride(ctab), _row_stride(pad),
        heads, length, *table_reach(length, bias, ctab), scale * log2e, log2e, threshold, keep_scale,
    )
    flags = dict(HAS_BIAS=bias is not None, HAS_C=ctab is not None, HAS_PAD=pad is not None,
                 HAS_DROPOUT=dropout_p > 0, D=head_dim, BLOCK_D=_block_d(head_dim), PRECISION=_precision(q.dtype),
                 ACC=acc_tl, EXP2=exp2)
    inputs = (q, k, v, _or(bias, dummy), _or(ctab, dummy), _or(pad, dummy), _or(seed, dummy), grad_out,
              row_max, row_sum, delta)
    in_dq = cfg["table_grads"] == "dq"
    bias_grad, c_grad = d_bias is not None, d_c is not None
    if far is not None and not far_share_fits(cfg, bias is not None or ctab is not None, pad is not None):
        raise ValueError("far: the forward's far share gives wrong table gradients here (far_share_fits)")
    far_consts = far_flags(cfg, far is not None)
    far_dq = far_consts["dq"]["FAR_DQ"]
    if far_dq and far_dq_sum is None:
        far_dq_sum = q.new_zeros(batch * heads, length, head_dim, dtype=row_max.dtype)
    far_dq_sum = far_dq_sum if far_dq else dummy
    block_m, block_n, warps, stages = _tiles(cfg, "dkdv")
    _backward_dkdv_kernel[(triton.cdiv(length, block_n), batch * heads)](
        *inputs, dk, dv, _or(d_bias, dummy), _or(d_c, dummy), far_dq_sum, *common,
        BIAS_GRAD=bias_grad and not in_dq, C_GRAD=c_grad and not in_dq, FAR_BRANCH=cfg.get("far_branch", False),
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages, **far_consts["dkdv"], **flags,
    )
    block_m, block_n, warps, stages = _tiles(cfg, "dq")
    _backward_dq_kernel[(triton.cdiv(length, block_m), batch * heads)](
        *inputs, dq, _or(d_bias, dummy), _or(d_c, dummy), far_dq_sum, *common,
        BIAS_GRAD=bias_grad and in_dq, C_GRAD=c_grad and in_dq, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=warps, num_stages=stages, **far_consts["dq"], **flags,
    )


def table_reach(length: int, bias=None, ctab=None):
    """``(LAST_B, LAST_C, FAR)`` of a call: each table's last entry read, ``min(n, T) - 1`` for an ``(H, n)``
    table (distances past it read it), and the distance from which both are constant, so that key tiles
    wholly at or past it are far tiles (``T`` without tables: no far tiles)."""
    last = [min(t.size(1), length) - 1 if t is not None else 0 for t in (bias, ctab)]
    present = [n for n, t in zip(last, (bias, ctab)) if t is not None]
    return last[0], last[1], max(present) if present else length


def far_tiles(kernel: str, length: int, far: int, block_m: int, block_n: int, grid=None) -> int:
    """How many (query tile, key tile) pairs of one (batch, head) ``kernel`` ("forward", "dq" or "dkdv")
    runs as far tiles at ``FAR = far``, with tiles of ``block_m`` queries and ``block_n`` keys: the
    kernels' own loop bounds (forward and dQ: key tiles before ``max(start_m - FAR + 1, 0) // BLOCK_N``
    tiles; dK/dV: query tiles from ``ceil((start_n + BLOCK_N - 1 + FAR) / BLOCK_M)`` on). On a ``grid``
    ``(FAR_M, FAR_N)`` (``_key_tile_ranges``): the tiles within the whole ``FAR_N``-blocks of keys at
    ``j <= q0 - FAR``, ``q0`` the first row of each ``FAR_M``-block of queries; dQ's far tiles with the
    far share are those on the forward's tiles, dK/dV's with :func:`far_dq_fits` those on
    :func:`far_dq_grid` (dQ's far loop then runs the difference)."""
    if kernel in ("forward", "dq"):
        gm, gn = grid or (block_m, block_n)
        return sum(max((start_m // gm) * gm - far + 1, 0) // gn * gn // block_n
                   for start_m in range(0, length, block_m))
    total = 0
    for start_n in range(0, length, block_n):
        above = -(-(start_n + block_n - 1) // block_m) * block_m
        if grid is None:
            first = -(-(start_n + block_n - 1 + far) // block_m) * block_m
        else:
            gm, gn = grid
            first = -(-((start_n // gn + 1) * gn + far - 1) // gm) * gm
        total += max(0, -(-(length - max(first, above)) // block_m))
    return total


def _or(x, default):
    return default if x is None else x


def _row_stride(x) -> int:
    return 0 if x is None else x.stride(0)


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


def _dense(x: torch.Tensor) -> bool:
    """Whether ``x``'s elements fill its memory once, in some order of its dims (no overlap, no gaps):
    then ``torch.empty_strided(x.shape, x.stride())`` holds a gradient laid out like it."""
    expected = 1
    for stride, size in sorted((st, n) for st, n in zip(x.stride(), x.shape) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def tile_offsets_fit(x: torch.Tensor) -> bool:
    """Whether offsets inside a tile of ``x`` ``(B, H, T, d)``, ``(MAX_TILE - 1) * stride_t + (d - 1) *
    stride_d``, fit in int32 (the pointer bases of batch, head and tile are int64 in any case)."""
    return (MAX_TILE - 1) * abs(x.stride(2)) + (x.size(3) - 1) * abs(x.stride(3)) < 2**31


def _kernel_layout(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself where the kernels can use its strides (dense, tile offsets int32); a contiguous copy otherwise."""
    return x if _dense(x) and tile_offsets_fit(x) else x.contiguous()


def _like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)


def attention_dropout_mask(seed: torch.Tensor, batch: int, heads: int, length: int, dropout_p: float) -> torch.Tensor:
    """``(B, H, T, T)`` float32: the kernels' ``Z`` for ``seed`` (:func:`dropout_keep`'s scale kept, 0 dropped), on seed's device."""
    out = torch.empty(batch * heads, length, length, device=seed.device, dtype=torch.float32)
    block = 64
    threshold, keep_scale = dropout_keep(dropout_p)
    _dropout_mask_kernel[(triton.cdiv(length, block), batch * heads)](seed, out, length, threshold, keep_scale,
                                                                      BLOCK=block)
    return out.view(batch, heads, length, length)


def new_dropout_seed(device: torch.device) -> torch.Tensor:
    """A one-element int64 seed drawn from torch's default generator of ``device`` (``--seed`` fixes it)."""
    return torch.randint(0, 2**62, (1,), device=device, dtype=torch.int64)


class FusedCausalURPEAttention(torch.autograd.Function):
    """Autograd wrapper of the Triton kernels; use :func:`fused_causal_urpe_attention`."""

    @staticmethod
    def forward(ctx, q, k, v, bias_by_distance, c_by_distance, key_padding_mask, scale, dropout_p, seed, blocks,
                tables_learn):
        batch, heads, length, head_dim = q.shape
        _, acc_torch = _accumulator(q.dtype)
        cfg = _blocks(q.device, head_dim, q.dtype, blocks)
        bias = bias_by_distance.to(acc_torch).contiguous() if bias_by_distance is not None else None
        ctab = c_by_distance.to(acc_torch).contiguous() if c_by_distance is not None else None
        pad = key_padding_mask.to(torch.int8).contiguous() if key_padding_mask is not None else None
        out = _like(q)
        row_max = torch.empty(batch * heads, length, device=q.device, dtype=acc_torch)
        row_sum = torch.empty_like(row_max)
        far = FarShare.empty(q, row_max) if _uses_far_share(cfg, length, bias, ctab, pad, tables_learn) else None
        launch_forward(q, k, v, bias, ctab, pad, out, row_max, row_sum, scale, cfg, dropout_p, seed, far)
        ctx.save_for_backward(q, k, v, out, bias, ctab, pad, row_max, row_sum, seed, *(far or (None, None, None)))
        ctx.table_dtypes = (
            bias_by_distance.dtype if bias_by_distance is not None else None,
            c_by_distance.dtype if c_by_distance is not None else None,
        )
        ctx.scale, ctx.cfg, ctx.dropout_p = scale, cfg, dropout_p
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, bias, ctab, pad, row_max, row_sum, seed, *far = ctx.saved_tensors
        far = FarShare(*far) if far[0] is not None else None
        grad_out = _kernel_layout(grad_out)
        delta = torch.empty_like(row_max)  # (B * H, T): D_i
        d_bias = torch.zeros_like(bias) if bias is not None and ctx.needs_input_grad[3] else None  # (H, n)
        d_c = torch.zeros_like(ctab) if ctab is not None and ctx.needs_input_grad[4] else None
        launch_delta(out, grad_out, delta, far, row_max, row_sum, bias, ctab, d_bias, d_c)
        dq, dk, dv = _like(q), _like(k), _like(v)
        launch_backward(q, k, v, bias, ctab, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c,
                        ctx.scale, ctx.cfg, ctx.dropout_p, seed, far)
        bias_dtype, c_dtype = ctx.table_dtypes
        return (
            dq, dk, dv,
            d_bias.to(bias_dtype) if d_bias is not None else None,
            d_c.to(c_dtype) if d_c is not None else None,
            None, None, None, None, None, None,
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
        bias_by_distance: ``(H, n)``, ``n >= 1``: ``B_ij = bias_by_distance[h, min(i - j, n - 1)]`` (the
            last entry holds for every distance past it), or ``None``. Pass a table that is constant from
            some distance on only up to there: the tiles past it run without table reads.
        c_by_distance: ``(H, n)``: ``C_ij = c_by_distance[h, min(i - j, n - 1)]``, or ``None`` (``C = 1``).
        key_padding_mask: ``(B, T)`` bool, true at padded keys, or ``None``.
        scale: multiplies ``Q K^T``; default ``1 / sqrt(d)``.
        dropout_p: attention dropout on ``A ⊙ C``, run at ``round(256 p) / 256``, kept entries scaled by
            the inverse of the keep rate (:mod:`.dropout_rate`); a ``p`` whose 8-bit rate is more than 10%
            off (e.g. 0.001, 0.01) raises ``ValueError``.
        dropout_seed: one-element int64 tensor on q's device choosing the mask (see
            :func:`attention_dropout_mask`); default: drawn from torch's generator (:func:`new_dropout_seed`).
        blocks: overrides of the tile choices (keys and values as in ``INTERPRETER_BLOCKS``; a tile's
            pipeline stages may be left out).

    Returns ``(B, H, T, d)`` laid out like ``q``; gradients reach q, k, v and both tables (float32
    accumulation; diagonal sums and, where :func:`far_dq_fits`, the far tiles' dQ by atomic adds, so table
    gradients and dQ are not bitwise deterministic).
    """
    batch, heads, length, head_dim = q.shape
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must have one shape (B, H, T, d); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head dim {head_dim} exceeds the kernel's maximum of {MAX_HEAD_DIM}")
    for name, table in (("bias_by_distance", bias_by_distance), ("c_by_distance", c_by_distance)):
        if table is not None and (table.dim() != 2 or table.size(0) != heads or table.size(1) < 1):
            raise ValueError(f"{name} must be (H={heads}, n >= 1); got {tuple(table.shape)}")
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (batch, length):
        raise ValueError(f"key_padding_mask must be (B={batch}, T={length}); got {tuple(key_padding_mask.shape)}")
    if batch * heads > 65535:
        raise ValueError(f"batch x heads = {batch * heads} exceeds the kernel grid's 65535")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1); got {dropout_p}")
    dropout_keep(dropout_p)  # raises where the kernel's 8-bit rate is more than 10% from p (dropout_rate)
    if length == 0:
        return torch.empty_like(q)
    seed = None
    if dropout_p > 0:
        seed = new_dropout_seed(q.device) if dropout_seed is None else dropout_seed.to(q.device, torch.int64).reshape(1)
    # Gradients are allocated like their inputs and written with the inputs' strides: make overlapping
    # or gapped views (e.g. expanded k, v) dense first, and views whose tile offsets overflow int32.
    q, k, v = (_kernel_layout(x) for x in (q, k, v))
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    # Whether a backward will want table gradients (then the forward stores the far share); inside the
    # autograd Function grad mode is off and needs_input_grad ignores torch.no_grad(), so decide here.
    tables = (bias_by_distance, c_by_distance)
    tables_learn = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tables)
    return FusedCausalURPEAttention.apply(q, k, v, bias_by_distance, c_by_distance, key_padding_mask, scale,
                                          float(dropout_p), seed, blocks, tables_learn)
