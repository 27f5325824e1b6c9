"""The fused backward kernels (``@triton.jit`` device code only): dK and dV, dQ and the table gradients,
and ``D_i = dO_i . O_i`` with the far share's table gradients (``fused_urpe_attention.py`` has the math and
launches them). P (and Z) are recomputed tile by tile from the forward's row max and row sum.
"""

import triton
import triton.language as tl

from .score_tiles import (DIAGONAL_STAGE, FAR_STAGE, NEAR_STAGE, PAD_SCORE, c_times_keep_scale, dropout_kept,
                          exp_base, far_values, head_tile_offsets, key_range, key_tile, key_tile_ranges, load_seed,
                          load_tile, program_head, row_stats, scores, tile_mask, tile_rows, z_scale)


@triton.jit
def add_diagonal_sums(x, GRAD, base, LAST, A: tl.constexpr, B: tl.constexpr, SIGN: tl.constexpr, factor=1.0,
                      PARTIALS: tl.constexpr = False):
    """GRAD[min(k, LAST)] += ``factor`` times the sum of the (A, B) tile ``x`` along each diagonal: entry (a, b) is at
    distance ``k = base + SIGN * (a - b)``; only the A + B - 1 diagonals the tile holds, and only ``k >= 0``
    (distances past the table's last entry read that entry, so their sums go there).

    ``PARTIALS`` (``SIGN`` 1; the deterministic backward): no atomics; ``GRAD`` is this program's block of partial
    rows of ``2 L`` entries, ``L = max(A, B)``, and the tile's sums are stored in row ``(base + L) / min(A, B)``:
    entry ``t`` holds distance ``base - L + t`` (``fold_partial_rows`` adds the rows up in a fixed order).

    One gather shears the tile cyclically along its longer side L so that every diagonal lies in one
    line: with A >= B, entry (v, c) takes x[(c + v) mod L, c], on local diagonal v (where c + v < L)
    or v - L (where it wrapped); the transposed rule otherwise. Two masked sums then give 2 L diagonal
    sums, added to GRAD by relaxed atomics (stored, with ``PARTIALS``). The sheared tile is the size of the tile.
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
    if PARTIALS:  # each (program, row) is written by this tile alone: plain stores
        tl.static_assert(SIGN == 1, "partial rows hold dQ's tiles (SIGN 1)")
        # entry (t, 0): back[t], distance base - L + t (0 where the tile has no such diagonal); (t, 1): here[t]
        row = GRAD + ((base + L) // min(A, B)) * (2 * L)
        tl.store(row + local[:, None] + L * tl.arange(0, 2)[None, :], tl.join(back, here))
    else:
        k = base + SIGN * local
        tl.atomic_add(GRAD + tl.minimum(k, LAST), here, mask=(local < A) & (k >= 0), sem="relaxed")
        k = base + SIGN * (local - L)
        tl.atomic_add(GRAD + tl.minimum(k, LAST), back, mask=(local > L - B) & (k >= 0), sem="relaxed")


@triton.jit
def add_far_sum(GRAD, LAST, total):
    """GRAD[LAST] += ``total`` ((1, 1) or (1,)): the far tiles' gradient of the table's last entry, one atomic."""
    tl.atomic_add(GRAD + LAST + tl.arange(0, 1), tl.reshape(total, [1]), sem="relaxed")


@triton.jit
def dkdv_tiles(
    dk, dv, db_far, dc_far, k, v, Q, DO, FarDQ, RowMax, RowSum, Delta, BIAS_TABLE, C_TABLE, D_BIAS_TABLE, D_C_TABLE,
    seed, padded, cols, offs_m, dims, start_n, lo, above, far, bh, stride_qt, stride_qd, stride_dot, stride_dod,
    T, LAST_B, LAST_C, b_far, c_far, D: tl.constexpr, qk_scale, log2e, keep_threshold, keep_scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    FAR_DQ: tl.constexpr, ONE_PASS: tl.constexpr, BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr, STAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SLICE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
    EXP2: tl.constexpr,
):
    """The query tiles of one ``STAGE`` of dK, dV (:mod:`.score_tiles`; on the diagonal: ``lo .. above``,
    near: ``above .. far``, far: ``far ..``), with keys as rows (transposed tiles, ``k q^T``: the products'
    M is BLOCK_N). ``Q``, ``DO`` point at this (batch, head)'s query 0, ``RowMax``, ``RowSum``, ``Delta``
    at its row 0. Far tiles read the scalar tables ``b_far``, ``c_far``; with ``FAR_DQ`` they add their
    ``dS K`` to ``FarDQ``. ``ONE_PASS`` (the one-pass backward, no dQ kernel): every tile adds its ``dS K`` to
    ``FarDQ`` and its table gradients (``BIAS_GRAD``, ``C_GRAD``): near and diagonal tiles their diagonal sums
    into ``D_BIAS_TABLE``, ``D_C_TABLE`` by atomics, far tiles theirs to the running ``db_far``, ``dc_far``.
    Returns the running ``dk``, ``dv``, ``db_far``, ``dc_far``."""
    FAR_TILE: tl.constexpr = STAGE == FAR_STAGE
    if STAGE == DIAGONAL_STAGE:
        first_m, last_m = lo, tl.minimum(above, T)
    elif STAGE == NEAR_STAGE:
        first_m, last_m = above, tl.minimum(far, T)
    else:
        first_m, last_m = far, T
    for start_m in range(first_m, last_m, BLOCK_M):
        rows, row_mask, first_row = tile_mask(start_m, offs_m, dims, T, D)
        q = load_tile(Q, first_row, offs_m, dims, stride_qt, stride_qd, row_mask)  # (BLOCK_M, BLOCK_D)
        do = load_tile(DO, first_row, offs_m, dims, stride_dot, stride_dod, row_mask)
        m, l, delta = row_stats(RowMax, RowSum, Delta, rows, T)
        distance = rows[None, :] - cols[:, None]  # (BLOCK_N, BLOCK_M): i - j
        first = start_m - start_n - (BLOCK_N - 1)
        s = scores(k, q, BIAS_TABLE, first, distance, LAST_B, b_far, qk_scale, log2e, HAS_BIAS, FAR_TILE, SLICE, BLOCK_N,
                    BLOCK_M, PRECISION, ACC)  # S^T
        if HAS_PAD:
            s = tl.where(padded[:, None], PAD_SCORE, s)
        if STAGE == DIAGONAL_STAGE:
            s = tl.where(distance >= 0, s, float("-inf"))
        p = exp_base(s - m[None, :], EXP2) / l[None, :]  # P^T
        dw = tl.dot(v, tl.trans(do), input_precision=PRECISION, out_dtype=ACC)  # (dO V^T)^T
        w = p
        if HAS_DROPOUT:  # Z^T / keep_scale: the scale rides on c
            keep = tl.trans(dropout_kept(seed, bh, rows, start_n, keep_threshold, BLOCK_M, BLOCK_N))
            dw = tl.where(keep, dw, 0.0)
            w = tl.where(keep, p, 0.0)
        if HAS_C or HAS_DROPOUT:
            c = c_times_keep_scale(C_TABLE, c_far, first, distance, LAST_C, keep_scale, HAS_C, HAS_DROPOUT, FAR_TILE,
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
        if ONE_PASS or (FAR_DQ and FAR_TILE):  # this tile's share of dQ, dS K (unscaled), added to the sum dQ's
            # kernel reads (or, one pass, dQ itself) as (K^T dS^T)^T: the product's M is the head dim, 64 or more,
            # as Hopper's wgmma wants
            dq = tl.trans(tl.dot(tl.trans(k), ds_in, input_precision=PRECISION, out_dtype=ACC))  # (BLOCK_M, BLOCK_D)
            tl.atomic_add(FarDQ + first_row * D + offs_m[:, None] * D + dims[None, :], dq, mask=row_mask, sem="relaxed")
        if ONE_PASS and BIAS_GRAD:  # entry (key a, query b) of the tile: distance start_m - start_n - (a - b)
            if FAR_TILE:
                db_far += tl.sum(ds)
            else:
                add_diagonal_sums(ds, D_BIAS_TABLE, start_m - start_n, LAST_B, BLOCK_N, BLOCK_M, -1)
        if ONE_PASS and C_GRAD:
            if FAR_TILE:
                dc_far += tl.sum(dw * p)
            else:
                add_diagonal_sums(dw * p, D_C_TABLE, start_m - start_n, LAST_C, BLOCK_N, BLOCK_M, -1,
                                   z_scale(keep_scale, HAS_DROPOUT))
    return dk, dv, db_far, dc_far


@triton.jit
def dkdv_kernel(
    Q, K, V, BIAS_TABLE, C_TABLE, PAD, SEED, DO, RowMax, RowSum, Delta, DK, DV, FarDQ,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_bias_table_h, stride_c_table_h, stride_pad_b,
    H, T, LAST_B, LAST_C, FAR, qk_scale, log2e, keep_threshold, keep_scale, D_BIAS_TABLE, D_C_TABLE,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    FAR_DQ: tl.constexpr, ONE_PASS: tl.constexpr, BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr,
    FAR_M: tl.constexpr, FAR_N: tl.constexpr,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr, EXP2: tl.constexpr,
):
    """One program: BLOCK_N keys of one (batch, head), streaming over the queries that see them (those on
    the diagonal, then near ones, then far ones; the first key tiles, seen by the most queries, start first).

    Accumulates dK and dV in registers; dK, dV are laid out like K, V (same strides). The table
    gradients come from the dQ kernel (and the delta kernel's far share).

    ``FAR_DQ``: the far tiles are those on the grid ``FAR_M x FAR_N`` (``key_tile_ranges``; the forward's
    far tiles or fewer), and each adds its ``dS K`` (unscaled) to ``FarDQ`` ``(B * H, T, D)`` by relaxed
    atomics, for the dQ kernel to read.

    ``ONE_PASS`` (no ``FAR_DQ``, no far share): the whole backward but ``D_i``, as FlashAttention-2's: every tile
    adds its ``dS K`` to ``FarDQ`` (then dQ, unscaled) and, where wanted, its table gradients to
    ``D_BIAS_TABLE``, ``D_C_TABLE`` (laid out like the tables), all by relaxed atomics.
    """
    start_n = tl.program_id(0) * BLOCK_N
    bh, b, h = program_head(H)
    seed = load_seed(SEED, HAS_DROPOUT)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n, dims, cols, col_mask, first_col = tile_rows(start_n, T, D, BLOCK_N, BLOCK_D)
    k_offsets = head_tile_offsets(b, h, first_col, offs_n, dims, stride_kb, stride_kh, stride_kt, stride_kd)
    v_offsets = head_tile_offsets(b, h, first_col, offs_n, dims, stride_vb, stride_vh, stride_vt, stride_vd)
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
    BIAS_TABLE += h * stride_bias_table_h
    C_TABLE += h * stride_c_table_h
    SLICE: tl.constexpr = 2 * max(BLOCK_M, BLOCK_N)
    b_far, c_far = far_values(BIAS_TABLE, C_TABLE, LAST_B, LAST_C, log2e, HAS_BIAS, HAS_C, ACC)
    c_far = c_far * z_scale(keep_scale, HAS_DROPOUT)  # C ⊙ keep_scale of far tiles (dropout)
    dk = tl.zeros([BLOCK_N, BLOCK_D], ACC)
    dv = tl.zeros([BLOCK_N, BLOCK_D], ACC)
    db_far = tl.zeros([1, 1], ACC)  # one pass: the far tiles' gradients of b[LAST_B], c[LAST_C]
    dc_far = tl.zeros([1, 1], ACC)
    if ONE_PASS:
        tl.static_assert(not FAR_DQ, "the one-pass backward adds every tile's dQ")
        D_BIAS_TABLE += h * stride_bias_table_h
        D_C_TABLE += h * stride_c_table_h
    lo = (start_n // BLOCK_M) * BLOCK_M  # the first query tile that sees a key of this tile
    above = tl.cdiv(start_n + BLOCK_N - 1, BLOCK_M) * BLOCK_M  # query tiles from here on see every key of it
    if FAR_DQ:  # ... and the far ones: those within the far FAR_M x FAR_N blocks (key_tile_ranges; far_dq_grid)
        far = tl.maximum(tl.cdiv((start_n // FAR_N + 1) * FAR_N + FAR - 1, FAR_M) * FAR_M, above)
    else:  # ... and from here on only at distances >= FAR (i - j >= FAR for every entry)
        far = tl.maximum(tl.cdiv(start_n + BLOCK_N - 1 + FAR, BLOCK_M) * BLOCK_M, above)
    dk, dv, db_far, dc_far = dkdv_tiles(
        dk, dv, db_far, dc_far, k, v, Q, DO, FarDQ, RowMax, RowSum, Delta, BIAS_TABLE, C_TABLE, D_BIAS_TABLE, D_C_TABLE,
        seed, padded, cols, offs_m, dims, start_n, lo, above, far, bh, stride_qt, stride_qd, stride_dot, stride_dod,
        T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD,
        HAS_DROPOUT, FAR_DQ, ONE_PASS, BIAS_GRAD, C_GRAD, DIAGONAL_STAGE, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)
    dk, dv, db_far, dc_far = dkdv_tiles(
        dk, dv, db_far, dc_far, k, v, Q, DO, FarDQ, RowMax, RowSum, Delta, BIAS_TABLE, C_TABLE, D_BIAS_TABLE, D_C_TABLE,
        seed, padded, cols, offs_m, dims, start_n, lo, above, far, bh, stride_qt, stride_qd, stride_dot, stride_dod,
        T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD,
        HAS_DROPOUT, FAR_DQ, ONE_PASS, BIAS_GRAD, C_GRAD, NEAR_STAGE, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)
    dk, dv, db_far, dc_far = dkdv_tiles(
        dk, dv, db_far, dc_far, k, v, Q, DO, FarDQ, RowMax, RowSum, Delta, BIAS_TABLE, C_TABLE, D_BIAS_TABLE, D_C_TABLE,
        seed, padded, cols, offs_m, dims, start_n, lo, above, far, bh, stride_qt, stride_qd, stride_dot, stride_dod,
        T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD,
        HAS_DROPOUT, FAR_DQ, ONE_PASS, BIAS_GRAD, C_GRAD, FAR_STAGE, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)
    if ONE_PASS and BIAS_GRAD:
        add_far_sum(D_BIAS_TABLE, LAST_B, db_far)
    if ONE_PASS and C_GRAD:
        add_far_sum(D_C_TABLE, LAST_C, dc_far * z_scale(keep_scale, HAS_DROPOUT))
    dk *= qk_scale / log2e  # scale
    tl.store(DK + k_offsets, dk.to(DK.dtype.element_ty), mask=col_mask)
    tl.store(DV + v_offsets, dv.to(DV.dtype.element_ty), mask=col_mask)


@triton.jit
def dq_tiles(
    dq, db_far, dc_far, q, do, m, l, delta, K, V, BIAS_TABLE, C_TABLE, PAD, D_BIAS_TABLE, D_C_TABLE, seed, rows,
    offs_n, dims, start_m, first_far, far, below, bh, stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C,
    b_far, c_far, D: tl.constexpr, qk_scale, log2e, keep_threshold, keep_scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr, FAR_SUMS: tl.constexpr, STAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SLICE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr,
    EXP2: tl.constexpr, PARTIALS: tl.constexpr,
):
    """The key tiles of one ``STAGE`` of dQ (:mod:`.score_tiles`; far: ``first_far .. far``, near:
    ``far .. below``, on the diagonal: ``below ..``) and, when asked, of the table gradients: diagonal sums
    on near tiles; far tiles add theirs to the running ``db_far``, ``dc_far``, except with the far share
    (``FAR_SUMS``: the delta kernel adds them). With ``PARTIALS``, ``D_BIAS_TABLE`` and ``D_C_TABLE`` are this
    program's partial rows (``add_diagonal_sums``). Returns the running ``dq``, ``db_far``, ``dc_far``."""
    FAR_TILE: tl.constexpr = STAGE == FAR_STAGE
    TILE_BIAS_GRAD: tl.constexpr = BIAS_GRAD and not (FAR_TILE and FAR_SUMS)
    TILE_C_GRAD: tl.constexpr = C_GRAD and not (FAR_TILE and FAR_SUMS)
    lo, hi = key_range(STAGE, first_far, far, below, start_m, T, BLOCK_M)
    for start_n in range(lo, hi, BLOCK_N):
        k, v, distance, first, s, padded = key_tile(
            q, K, V, BIAS_TABLE, PAD, rows, offs_n, dims, start_m, start_n, stride_kt, stride_kd, stride_vt, stride_vd,
            T, LAST_B, b_far, D, qk_scale, log2e, HAS_BIAS, HAS_PAD, STAGE, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC)
        p = exp_base(s - m[:, None], EXP2) / l[:, None]
        dw = tl.dot(do, tl.trans(v), input_precision=PRECISION, out_dtype=ACC)
        if HAS_DROPOUT:  # Z / keep_scale: the scale rides on c
            dw = tl.where(dropout_kept(seed, bh, rows, start_n, keep_threshold, BLOCK_M, BLOCK_N), dw, 0.0)
        if HAS_C or HAS_DROPOUT:
            dp = dw * c_times_keep_scale(C_TABLE, c_far, first, distance, LAST_C, keep_scale, HAS_C, HAS_DROPOUT,
                                          FAR_TILE, SLICE, BLOCK_M, BLOCK_N)
        else:
            dp = dw
        ds = p * (dp - delta[:, None])
        if HAS_PAD:
            ds = tl.where(padded[None, :], 0.0, ds)  # masked scores pass no gradient
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION, out_dtype=ACC)
        if TILE_BIAS_GRAD:
            if FAR_TILE:
                db_far += tl.sum(ds)
            else:
                add_diagonal_sums(ds, D_BIAS_TABLE, start_m - start_n, LAST_B, BLOCK_M, BLOCK_N, 1, 1.0, PARTIALS)
        if TILE_C_GRAD:
            if FAR_TILE:
                dc_far += tl.sum(dw * p)
            else:
                add_diagonal_sums(dw * p, D_C_TABLE, start_m - start_n, LAST_C, BLOCK_M, BLOCK_N, 1,
                                   z_scale(keep_scale, HAS_DROPOUT), PARTIALS)
    return dq, db_far, dc_far


@triton.jit
def dq_kernel(
    Q, K, V, BIAS_TABLE, C_TABLE, PAD, SEED, DO, RowMax, RowSum, Delta, DQ, D_BIAS_TABLE, D_C_TABLE, FarDQ,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_bias_table_h, stride_c_table_h, stride_pad_b,
    H, T, LAST_B, LAST_C, FAR, qk_scale, log2e, keep_threshold, keep_scale, PARTIAL_ROWS,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr, FAR_SUMS: tl.constexpr, FAR_DQ: tl.constexpr,
    FAR_M: tl.constexpr, FAR_N: tl.constexpr, DQ_FAR_N: tl.constexpr,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr, EXP2: tl.constexpr, PARTIALS: tl.constexpr,
):
    """One program: dQ for BLOCK_M queries of one (batch, head), the last (most keys) first; dQ is laid
    out like Q.

    ``FAR_SUMS``: the far tiles are the forward's (its tiles ``FAR_M`` x ``FAR_N``, multiples of these),
    and their table gradients come from the delta kernel, so they add none here. ``FAR_DQ``: the dK/dV
    kernel has added the dQ of the far tiles on the grid ``FAR_M x DQ_FAR_N`` to ``FarDQ``; this kernel
    runs the forward's other far tiles and adds ``FarDQ``'s rows.

    ``PARTIALS`` (the deterministic backward; no ``FAR_SUMS``): no atomics; ``D_BIAS_TABLE`` and ``D_C_TABLE``
    are ``(B * H, programs, PARTIAL_ROWS, 2 max(BLOCK_M, BLOCK_N))`` zeros: this program's near tiles store
    their diagonal sums in its rows (``add_diagonal_sums``), its far tiles' sum goes to entry 0 of its last row."""
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    bh, b, h = program_head(H)
    seed = load_seed(SEED, HAS_DROPOUT)
    offs_m, dims, rows, row_mask, first_row = tile_rows(start_m, T, D, BLOCK_M, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    q_offsets = head_tile_offsets(b, h, first_row, offs_m, dims, stride_qb, stride_qh, stride_qt, stride_qd)
    q = tl.load(Q + q_offsets, mask=row_mask, other=0.0)
    do = load_tile(DO + b * stride_dob + h * stride_doh, first_row, offs_m, dims, stride_dot, stride_dod, row_mask)
    stats = tl.cast(bh, tl.int64) * T
    m, l, delta = row_stats(RowMax + stats, RowSum + stats, Delta + stats, rows, T)
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    PAD += b * stride_pad_b
    BIAS_TABLE += h * stride_bias_table_h
    C_TABLE += h * stride_c_table_h
    SLICE: tl.constexpr = 2 * max(BLOCK_M, BLOCK_N)
    if PARTIALS:  # this program's rows
        tl.static_assert(not FAR_SUMS, "the far share adds its table gradients by atomics")
        block = (tl.cast(bh, tl.int64) * tl.num_programs(0) + start_m // BLOCK_M) * PARTIAL_ROWS * SLICE
        D_BIAS_TABLE += block
        D_C_TABLE += block
    else:
        D_BIAS_TABLE += h * stride_bias_table_h
        D_C_TABLE += h * stride_c_table_h
    b_far, c_far = far_values(BIAS_TABLE, C_TABLE, LAST_B, LAST_C, log2e, HAS_BIAS, HAS_C, ACC)
    c_far = c_far * z_scale(keep_scale, HAS_DROPOUT)  # C ⊙ keep_scale of far tiles (dropout)
    db_far = tl.zeros([1, 1], ACC)  # the far tiles' gradients of b[LAST_B], c[LAST_C]
    dc_far = tl.zeros([1, 1], ACC)
    dq = tl.zeros([BLOCK_M, BLOCK_D], ACC)
    far, below = key_tile_ranges(start_m, FAR, BLOCK_N, FAR_M, FAR_N)
    first_far = 0
    if FAR_DQ:  # the keys before here: the dK/dV kernel has added their dQ to FarDQ
        first_far = key_tile_ranges(start_m, FAR, BLOCK_N, FAR_M, DQ_FAR_N)[0]
    dq, db_far, dc_far = dq_tiles(
        dq, db_far, dc_far, q, do, m, l, delta, K, V, BIAS_TABLE, C_TABLE, PAD, D_BIAS_TABLE, D_C_TABLE, seed, rows,
        offs_n, dims, start_m, first_far, far, below, bh, stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B,
        LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT,
        BIAS_GRAD, C_GRAD, FAR_SUMS, FAR_STAGE, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2, PARTIALS)
    dq, db_far, dc_far = dq_tiles(
        dq, db_far, dc_far, q, do, m, l, delta, K, V, BIAS_TABLE, C_TABLE, PAD, D_BIAS_TABLE, D_C_TABLE, seed, rows,
        offs_n, dims, start_m, first_far, far, below, bh, stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B,
        LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT,
        BIAS_GRAD, C_GRAD, FAR_SUMS, NEAR_STAGE, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2, PARTIALS)
    dq, db_far, dc_far = dq_tiles(
        dq, db_far, dc_far, q, do, m, l, delta, K, V, BIAS_TABLE, C_TABLE, PAD, D_BIAS_TABLE, D_C_TABLE, seed, rows,
        offs_n, dims, start_m, first_far, far, below, bh, stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B,
        LAST_C, b_far, c_far, D, qk_scale, log2e, keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT,
        BIAS_GRAD, C_GRAD, FAR_SUMS, DIAGONAL_STAGE, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2, PARTIALS)
    if PARTIALS:  # entry 0 of the last row
        far_entry = (PARTIAL_ROWS - 1) * SLICE + tl.arange(0, 1)
        if BIAS_GRAD:
            tl.store(D_BIAS_TABLE + far_entry, tl.reshape(db_far, [1]))
        if C_GRAD:
            tl.store(D_C_TABLE + far_entry, tl.reshape(dc_far * z_scale(keep_scale, HAS_DROPOUT), [1]))
    else:
        if BIAS_GRAD and not FAR_SUMS:
            add_far_sum(D_BIAS_TABLE, LAST_B, db_far)
        if C_GRAD and not FAR_SUMS:
            add_far_sum(D_C_TABLE, LAST_C, dc_far * z_scale(keep_scale, HAS_DROPOUT))
    if FAR_DQ:
        dq += tl.load(FarDQ + (stats + first_row) * D + offs_m[:, None] * D + dims[None, :], mask=row_mask,
                      other=0.0)
    dq *= qk_scale / log2e  # scale
    tl.store(DQ + q_offsets, dq.to(DQ.dtype.element_ty), mask=row_mask)


@triton.jit
def delta_kernel(O, DO, Delta, FarOut, FarMax, FarSum, RowMax, RowSum, C_TABLE, D_BIAS_TABLE, D_C_TABLE,
                  stride_ob, stride_oh, stride_ot, stride_od,
                  stride_dob, stride_doh, stride_dot, stride_dod, stride_bias_table_h, stride_c_table_h, H, T, LAST_B, LAST_C,
                  HAS_C: tl.constexpr, FAR_SUMS: tl.constexpr, BIAS_GRAD: tl.constexpr, C_GRAD: tl.constexpr,
                  D: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr,
                  EXP2: tl.constexpr):
    """``Delta[bh, i] = dO_i . O_i`` for BLOCK rows of one (batch, head), in the accumulator's dtype.

    ``FAR_SUMS``: also the table gradients of the far tiles (which the dQ kernel then skips), from the
    forward's far share: with ``P^far_i = FarSum_i e^(FarMax_i - m_i) / l_i`` (the row's softmax mass on
    its far keys) and ``a_i = P^far_i dO_i . FarOut_i`` (= sum over far j of ``P_ij Z_ij dO_i . v_j``),
    ``dc(last) += sum_i a_i`` and ``db(last) += sum_i (c(last) a_i - D_i P^far_i)``: one atomic per table.
    """
    bh, b, h = program_head(H)
    offs, dims, rows, mask, first = tile_rows(tl.program_id(0) * BLOCK, T, D, BLOCK, BLOCK_D)
    o = load_tile(O + b * stride_ob + h * stride_oh, first, offs, dims, stride_ot, stride_od, mask).to(ACC)
    do = load_tile(DO + b * stride_dob + h * stride_doh, first, offs, dims, stride_dot, stride_dod, mask).to(ACC)
    delta = tl.sum(o * do, 1)
    stats = tl.cast(bh, tl.int64) * T
    tl.store(Delta + stats + rows, delta, mask=rows < T)
    if FAR_SUMS:
        g = tl.load(FarOut + (stats + first) * D + offs[:, None] * D + dims[None, :], mask=mask, other=0.0).to(ACC)
        far_max = tl.load(FarMax + stats + rows, mask=rows < T, other=float("-inf"))
        far_sum = tl.load(FarSum + stats + rows, mask=rows < T, other=0.0)
        m = tl.load(RowMax + stats + rows, mask=rows < T, other=0.0)
        l = tl.load(RowSum + stats + rows, mask=rows < T, other=1.0)
        p_far = far_sum * exp_base(far_max - m, EXP2) / l  # (BLOCK,): 0 where a row has no far keys
        a = p_far * tl.sum(do * g, 1)
        if C_GRAD:
            add_far_sum(D_C_TABLE + h * stride_c_table_h, LAST_C, tl.sum(a, 0, keep_dims=True))
        if BIAS_GRAD:
            c_far = 1.0
            if HAS_C:
                c_far = tl.load(C_TABLE + h * stride_c_table_h + LAST_C).to(ACC)
            add_far_sum(D_BIAS_TABLE + h * stride_bias_table_h, LAST_B, tl.sum(c_far * a - delta * p_far, 0, keep_dims=True))
