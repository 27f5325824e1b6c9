"""The tile arithmetic every fused kernel shares (``@triton.jit`` device code only): a program's (batch,
head) and the rows, mask and addresses of its tiles, a tile's scores ``log2(e) (scale q k^T + B)`` (with
padding and the causal mask), a table's slice by distance expanded to a tile, the attention-dropout mask
of a tile (Philox-4x32-7), the far tiles' scalar tables, and which key tiles are far, below or on the
diagonal. The kernels that use them: ``forward_kernel.py``, ``backward_kernels.py``.

The three stages of every kernel's loop over tiles, as Triton's fused-attention tutorial's ``STAGE``:
``FAR_STAGE`` (tiles wholly at or past both tables' last entries: scalar tables, no causal mask),
``NEAR_STAGE`` (tiles wholly below the diagonal: table slices, no causal mask) and ``DIAGONAL_STAGE``
(tiles that cross the diagonal: table slices and the causal mask).
"""

import triton
import triton.language as tl

PAD_SCORE = tl.constexpr(-3.4028234663852886e38)  # torch.finfo(torch.float32).min
PHILOX_ROUNDS = tl.constexpr(7)  # attention dropout's Philox-4x32 rounds: FlashAttention-2's (Random123's default: 10)
FAR_STAGE = tl.constexpr(0)
NEAR_STAGE = tl.constexpr(1)
DIAGONAL_STAGE = tl.constexpr(2)


@triton.jit
def program_head(H):
    """This program's ``bh = program_id(1)`` (of ``B * H``) and its batch and head ``bh // H``, ``bh % H``
    in int64 (pointer bases of any size)."""
    bh = tl.program_id(1)
    return bh, tl.cast(bh // H, tl.int64), tl.cast(bh % H, tl.int64)


@triton.jit
def tile_mask(start, offs, dims, T, D: tl.constexpr):
    """Rows ``start + offs`` of a (T, D) matrix: their indices, the (len(offs), len(dims)) mask of the
    tile's entries inside the matrix, and ``start`` in int64 (the tile's first row, for its pointer base)."""
    rows = start + offs
    return rows, (rows[:, None] < T) & (dims[None, :] < D), tl.cast(start, tl.int64)


@triton.jit
def tile_rows(start, T, D: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr):
    """``(offs, dims, rows, mask, first)``: ``0 .. BLOCK - 1``, ``0 .. BLOCK_D - 1`` and
    :func:`tile_mask` of rows ``start .. start + BLOCK - 1``."""
    offs = tl.arange(0, BLOCK)
    dims = tl.arange(0, BLOCK_D)
    rows, mask, first = tile_mask(start, offs, dims, T, D)
    return offs, dims, rows, mask, first


@triton.jit
def tile_pointers(X, first, offs, dims, stride_t, stride_d):
    """Pointers (len(offs), len(dims)) to rows ``first + offs`` of ``X``, a (T, D) matrix with strides
    ``stride_t``, ``stride_d`` (``X`` at its (batch, head)); ``first`` int64, ``offs`` and ``dims`` int32."""
    return X + first * stride_t + offs[:, None] * stride_t + dims[None, :] * stride_d


@triton.jit
def load_tile(X, first, offs, dims, stride_t, stride_d, mask):
    """The tile of :func:`tile_pointers`, 0 outside ``mask``."""
    return tl.load(tile_pointers(X, first, offs, dims, stride_t, stride_d), mask=mask, other=0.0)


@triton.jit
def head_tile_offsets(b, h, first, offs, dims, stride_b, stride_h, stride_t, stride_d):
    """Element offsets (len(offs), len(dims)), int64, of rows ``first + offs`` of head ``(b, h)`` of a
    (B, H, T, D) tensor with strides ``stride_b .. stride_d``: for a load and a store at one tile."""
    return b * stride_b + h * stride_h + first * stride_t + offs[:, None] * stride_t + dims[None, :] * stride_d


@triton.jit
def row_stats(RowMax, RowSum, Delta, rows, T):
    """The forward's row max ``m``, row sum ``l`` and ``D_i`` of ``rows`` (each ``(len(rows),)``); rows >= T
    read ``m = inf``, so that their ``P = 0``."""
    m = tl.load(RowMax + rows, mask=rows < T, other=float("inf"))
    l = tl.load(RowSum + rows, mask=rows < T, other=1.0)
    delta = tl.load(Delta + rows, mask=rows < T, other=0.0)
    return m, l, delta


@triton.jit
def table_tile(TABLE, first, distance, LAST, L: tl.constexpr, M: tl.constexpr, N: tl.constexpr, factor=1.0):
    """The (M, N) tile ``factor * TABLE[min(distance, LAST)]`` (0 at negative distances), all distances
    within ``first .. first + L - 1``: one load of that slice (scaled there, L entries, not M N), expanded
    in registers by a gather."""
    d = first + tl.arange(0, L)
    entries = tl.load(TABLE + tl.minimum(d, LAST), mask=d >= 0, other=0.0) * factor  # (L,)
    return tl.reshape(tl.gather(entries, tl.reshape(distance - first, [M * N]), 0), [M, N])


@triton.jit
def dropout_scale(seed, bh, rows, start_n, keep_threshold, keep_scale, M: tl.constexpr, N: tl.constexpr):
    """``Z`` (M, N) for queries ``rows`` and keys ``start_n .. start_n + N - 1`` of head ``bh``:
    ``keep_scale`` where attention dropout keeps an entry, 0 where it drops it (:func:`dropout_kept`)."""
    return tl.where(dropout_kept(seed, bh, rows, start_n, keep_threshold, M, N), keep_scale, 0.0)


@triton.jit
def dropout_kept(seed, bh, rows, start_n, keep_threshold, M: tl.constexpr, N: tl.constexpr):
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
def z_scale(keep_scale, HAS_DROPOUT: tl.constexpr):
    """The scale of kept entries with dropout, in float32 as a GPU launch passes it (the interpreter keeps
    a Python float's 64 bits; the mask :func:`attention_dropout_mask` writes out holds float32); 1 (a
    constant) without."""
    if HAS_DROPOUT:
        return tl.cast(keep_scale, tl.float32)
    else:
        return 1.0


@triton.jit
def c_times_keep_scale(C_TABLE, c_far, first, distance, LAST_C, keep_scale, HAS_C: tl.constexpr,
                        HAS_DROPOUT: tl.constexpr, FAR_TILE: tl.constexpr, SLICE: tl.constexpr, M: tl.constexpr,
                        N: tl.constexpr):
    """``C ⊙ keep_scale`` of a backward tile (M, N), for HAS_C or HAS_DROPOUT: the scalar ``c_far`` (which
    carries the scale already) on far tiles, else the table's slice scaled (``keep_scale`` alone without C)."""
    if FAR_TILE:
        return c_far
    elif HAS_C:
        return table_tile(C_TABLE, first, distance, LAST_C, SLICE, M, N, z_scale(keep_scale, HAS_DROPOUT))
    else:
        return z_scale(keep_scale, HAS_DROPOUT)


@triton.jit
def load_seed(SEED, HAS_DROPOUT: tl.constexpr):
    if HAS_DROPOUT:
        seed = tl.load(SEED)
    else:
        seed = 0
    return seed


@triton.jit
def exp_base(x, EXP2: tl.constexpr):
    """``2^x`` (scores in base 2); ``e^x`` in float64, where the scores stay in base e (exact scales)."""
    if EXP2:
        return tl.exp2(x)
    else:
        return tl.exp(x)


@triton.jit
def far_values(BIAS_TABLE, C_TABLE, LAST_B, LAST_C, log2e, HAS_BIAS: tl.constexpr, HAS_C: tl.constexpr, ACC: tl.constexpr):
    """The tables' last entries, ``log2e b[LAST_B]`` and ``c[LAST_C]`` (scalars): B and C of every far tile."""
    b_far = 0.0
    c_far = 1.0
    if HAS_BIAS:
        b_far = tl.load(BIAS_TABLE + LAST_B).to(ACC) * log2e
    if HAS_C:
        c_far = tl.load(C_TABLE + LAST_C).to(ACC)
    return b_far, c_far


@triton.jit
def key_tile_ranges(start_m, FAR, BLOCK_N: tl.constexpr, FAR_M: tl.constexpr, FAR_N: tl.constexpr):
    """``(far, below)`` for the query tile at ``start_m``: key tiles before ``below`` lie wholly below the
    diagonal, those before ``far`` wholly at distances ``>= FAR``, decided on a grid of ``FAR_M x FAR_N``
    blocks (multiples of the tiles; the tiles themselves by default): keys before ``far`` are the whole
    ``FAR_N``-blocks with ``j <= q0 - FAR``, for ``q0`` the first row of the ``FAR_M``-block of ``start_m``,
    so every kernel that uses one grid runs the same (i, j) as far."""
    below = ((start_m + 1) // BLOCK_N) * BLOCK_N
    far = (tl.maximum((start_m // FAR_M) * FAR_M - FAR + 1, 0) // FAR_N) * FAR_N
    return far, below


@triton.jit
def scores(q, k, TABLE, first, distance, LAST, b_far, qk_scale, log2e,
            HAS_BIAS: tl.constexpr, FAR_TILE: tl.constexpr, SLICE: tl.constexpr, M: tl.constexpr, N: tl.constexpr,
            PRECISION: tl.constexpr, ACC: tl.constexpr):
    """``log2(e) (scale q k^T + B)`` (M, N) of one tile (``log2e`` 1 where the scores stay in base e); a far
    tile's B is the scalar ``b_far`` (already times ``log2e``)."""
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=ACC) * qk_scale
    if HAS_BIAS:
        if FAR_TILE:
            s += b_far
        else:
            s += table_tile(TABLE, first, distance, LAST, SLICE, M, N, log2e)
    return s


@triton.jit
def key_range(STAGE: tl.constexpr, first_far, far, below, start_m, T, BLOCK_M: tl.constexpr):
    """The keys ``(lo, hi)`` of one ``STAGE`` for the query tile at ``start_m``: far ``first_far .. far``,
    near ``far .. below``, on the diagonal ``below .. min(start_m + BLOCK_M, T)``."""
    if STAGE == FAR_STAGE:
        lo, hi = first_far, far
    elif STAGE == NEAR_STAGE:
        lo, hi = far, below
    else:
        lo, hi = below, tl.minimum(start_m + BLOCK_M, T)
    return lo, hi


@triton.jit
def key_tile(
    q, K, V, BIAS_TABLE, PAD, rows, offs_n, dims, start_m, start_n, stride_kt, stride_kd, stride_vt, stride_vd,
    T, LAST_B, b_far, D: tl.constexpr, qk_scale, log2e, HAS_BIAS: tl.constexpr, HAS_PAD: tl.constexpr,
    STAGE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SLICE: tl.constexpr,
    PRECISION: tl.constexpr, ACC: tl.constexpr,
):
    """Key tile ``start_n`` of the query tile ``q`` at ``start_m`` (``K``, ``V``, ``PAD`` at this (batch,
    head)'s key 0): ``(k, v, distance, first, s, padded)``, k and v (BLOCK_N, BLOCK_D), the distances
    ``i - j`` (BLOCK_M, BLOCK_N) and the tile's smallest, the :func:`scores` with padded keys at
    ``PAD_SCORE`` and, on the diagonal, future keys at -inf, and which keys are padded (BLOCK_N,)."""
    FAR_TILE: tl.constexpr = STAGE == FAR_STAGE
    cols, col_mask, start = tile_mask(start_n, offs_n, dims, T, D)
    k = load_tile(K, start, offs_n, dims, stride_kt, stride_kd, col_mask)  # (BLOCK_N, BLOCK_D)
    v = load_tile(V, start, offs_n, dims, stride_vt, stride_vd, col_mask)
    distance = rows[:, None] - cols[None, :]  # (BLOCK_M, BLOCK_N): i - j
    first = start_m - start_n - (BLOCK_N - 1)  # the tile's smallest distance
    s = scores(q, k, BIAS_TABLE, first, distance, LAST_B, b_far, qk_scale, log2e, HAS_BIAS, FAR_TILE, SLICE,
               BLOCK_M, BLOCK_N, PRECISION, ACC)
    padded = cols < 0
    if HAS_PAD:
        padded = tl.load(PAD + cols, mask=cols < T, other=1) != 0  # (BLOCK_N,)
        s = tl.where(padded[None, :], PAD_SCORE, s)
    if STAGE == DIAGONAL_STAGE:  # for rows < T this also hides keys >= T; rows >= T are never stored
        s = tl.where(distance >= 0, s, float("-inf"))
    return k, v, distance, first, s, padded


@triton.jit
def dropout_mask_kernel(SEED, Out, T, keep_threshold, keep_scale, BLOCK: tl.constexpr):
    """``Out[bh, i, j] = Z_ij`` of head ``bh``: the kernels' dropout scale, written out (for tests)."""
    bh = tl.program_id(1)
    seed = tl.load(SEED)
    offs = tl.arange(0, BLOCK)
    start_m = tl.program_id(0) * BLOCK
    rows = start_m + offs
    Out += tl.cast(bh, tl.int64) * T * T + tl.cast(start_m, tl.int64) * T  # this head's first row of the block
    for start_n in range(0, T, BLOCK):
        cols = start_n + offs
        z = dropout_scale(seed, bh, rows, start_n, keep_threshold, keep_scale, BLOCK, BLOCK)
        tl.store(Out + offs[:, None] * T + cols[None, :], z, mask=(rows[:, None] < T) & (cols[None, :] < T))
