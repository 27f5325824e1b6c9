"""The fused forward kernel (``@triton.jit`` device code only): FlashAttention-2's online softmax with a
relative bias ``B`` and a Toeplitz reweighting ``C`` by distance, and attention dropout inside
(``fused_urpe_attention.py`` has the math and launches it).

    O_i = sum_j P_ij C_ij Z_ij v_j,   P = softmax(scale Q K^T + B) row-wise, kept as the running row max
    m_i (base 2) and row sum l_i
"""

import triton
import triton.language as tl

from .score_tiles import (DIAGONAL_STAGE, FAR_STAGE, NEAR_STAGE, dropout_kept, exp_base, far_values, key_range, key_tile,
                          key_tile_ranges, load_seed, load_tile, program_head, table_tile, tile_pointers, tile_rows,
                          z_scale)


@triton.jit
def forward_tiles(
    acc, m_i, l_i, q, K, V, BIAS_TABLE, C_TABLE, PAD, seed, rows, offs_n, dims, start_m, far, below, bh,
    stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D: tl.constexpr, qk_scale, log2e,
    keep_threshold, keep_scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    STAGE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SLICE: tl.constexpr, PRECISION: tl.constexpr, ACC: tl.constexpr, EXP2: tl.constexpr,
):
    """The key tiles of one ``STAGE`` of the forward's online softmax (:mod:`.score_tiles`): far tiles
    (keys before ``far``: scalar ``b_far``, ``c_far``), near ones (``far .. below``) or those on the
    diagonal (causal mask). ``K``, ``V``, ``PAD`` point at this (batch, head)'s key 0, ``BIAS_TABLE``,
    ``C_TABLE`` at its head's table. Returns the running ``acc``, ``m_i``, ``l_i``."""
    FAR_TILE: tl.constexpr = STAGE == FAR_STAGE
    lo, hi = key_range(STAGE, 0, far, below, start_m, T, BLOCK_M)
    for start_n in range(lo, hi, BLOCK_N):
        _, v, distance, first, s, _ = key_tile(
            q, K, V, BIAS_TABLE, PAD, rows, offs_n, dims, start_m, start_n, stride_kt, stride_kd, stride_vt, stride_vd,
            T, LAST_B, b_far, D, qk_scale, log2e, HAS_BIAS, HAS_PAD, STAGE, BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC)
        # Key 0 is visible to every row and comes first, so m_i is finite after the first tile.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = exp_base(m_i - m_new, EXP2)
        p = exp_base(s - m_new[:, None], EXP2)
        l_i = l_i * alpha + tl.sum(p, 1)
        if HAS_C and not FAR_TILE:  # far tiles come first and share c_far: their sum is scaled once, after them
            p = p * table_tile(C_TABLE, first, distance, LAST_C, SLICE, BLOCK_M, BLOCK_N)
        if HAS_DROPOUT:  # Z / keep_scale; the kernel scales the row's sum once
            p = tl.where(dropout_kept(seed, bh, rows, start_n, keep_threshold, BLOCK_M, BLOCK_N), p, 0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION, out_dtype=ACC)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def forward_kernel(
    Q, K, V, BIAS_TABLE, C_TABLE, PAD, SEED, Out, RowMax, RowSum, FarOut, FarMax, FarSum,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_bias_table_h, stride_c_table_h, stride_pad_b,
    H, T, LAST_B, LAST_C, FAR, qk_scale, log2e, keep_threshold, keep_scale,
    HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    FAR_SUMS: tl.constexpr,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr, EXP2: tl.constexpr,
):
    """One program: BLOCK_M queries of one (batch, head), streaming over keys 0 .. the diagonal (far tiles,
    then near ones, then those on the diagonal); the last query tiles (the most keys) first.

    ``FAR_SUMS``: also store, after the far tiles, their share of the row (for the table gradients of far
    tiles, which :func:`~.backward_kernels.delta_kernel` then adds): ``FarOut_i = sum_far e^(S_ij - m') Z_ij v_j / l'``
    ``(B * H, T, D)`` and the running ``m'``, ``l'`` at that point in ``FarMax``, ``FarSum``."""
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    bh, b, h = program_head(H)
    seed = load_seed(SEED, HAS_DROPOUT)
    offs_m, dims, rows, row_mask, first_row = tile_rows(start_m, T, D, BLOCK_M, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    q = load_tile(Q + b * stride_qb + h * stride_qh, first_row, offs_m, dims, stride_qt, stride_qd, row_mask)
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    BIAS_TABLE += h * stride_bias_table_h
    C_TABLE += h * stride_c_table_h
    PAD += b * stride_pad_b
    SLICE: tl.constexpr = 2 * max(BLOCK_M, BLOCK_N)  # >= BLOCK_M + BLOCK_N - 1 distances, a power of 2

    b_far, c_far = far_values(BIAS_TABLE, C_TABLE, LAST_B, LAST_C, log2e, HAS_BIAS, HAS_C, ACC)

    m_i = tl.full([BLOCK_M], float("-inf"), ACC)  # running row max of S (base 2)
    l_i = tl.zeros([BLOCK_M], ACC)  # running row sum of exp(S - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], ACC)  # running (exp(S - m_i) ⊙ C ⊙ Z) V
    far, below = key_tile_ranges(start_m, FAR, BLOCK_N, BLOCK_M, BLOCK_N)
    acc, m_i, l_i = forward_tiles(
        acc, m_i, l_i, q, K, V, BIAS_TABLE, C_TABLE, PAD, seed, rows, offs_n, dims, start_m, far, below, bh,
        stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e,
        keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, FAR_STAGE,
        BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)
    if FAR_SUMS:
        far_rows = tl.cast(bh, tl.int64) * T + first_row
        row_factor = z_scale(keep_scale, HAS_DROPOUT) / tl.where(l_i > 0, l_i, 1.0)  # (BLOCK_M,)
        tl.store(FarOut + far_rows * D + offs_m[:, None] * D + dims[None, :],
                 (acc * row_factor[:, None]).to(FarOut.dtype.element_ty), mask=row_mask)
        tl.store(FarMax + far_rows + offs_m, m_i, mask=rows < T)
        tl.store(FarSum + far_rows + offs_m, l_i, mask=rows < T)
    if HAS_C:
        acc = acc * c_far
    acc, m_i, l_i = forward_tiles(
        acc, m_i, l_i, q, K, V, BIAS_TABLE, C_TABLE, PAD, seed, rows, offs_n, dims, start_m, far, below, bh,
        stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e,
        keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, NEAR_STAGE,
        BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)
    acc, m_i, l_i = forward_tiles(
        acc, m_i, l_i, q, K, V, BIAS_TABLE, C_TABLE, PAD, seed, rows, offs_n, dims, start_m, far, below, bh,
        stride_kt, stride_kd, stride_vt, stride_vd, T, LAST_B, LAST_C, b_far, c_far, D, qk_scale, log2e,
        keep_threshold, keep_scale, HAS_BIAS, HAS_C, HAS_PAD, HAS_DROPOUT, DIAGONAL_STAGE,
        BLOCK_M, BLOCK_N, SLICE, PRECISION, ACC, EXP2)

    out = acc / l_i[:, None]
    out = out * z_scale(keep_scale, HAS_DROPOUT)
    tl.store(tile_pointers(Out + b * stride_ob + h * stride_oh, first_row, offs_m, dims, stride_ot, stride_od),
             out.to(Out.dtype.element_ty), mask=row_mask)
    stats = tl.cast(bh, tl.int64) * T
    tl.store(RowMax + stats + rows, m_i, mask=rows < T)
    tl.store(RowSum + stats + rows, l_i, mask=rows < T)
