"""FlashAttention-2's shape of causal attention in Triton: the performance model's stand-in for SDPA flash.

Not product code: a benchmark stand-in, compiled and priced by the same path as the fused URPE kernel
(``python -m benchmarks.fused_kernel --compile-check``, ``benchmarks/gpu_check/prediction.py``), so that
the predicted ratio compares two kernels of one compiler on one model. No tables, no padding.

    forward   one program per (BLOCK_M queries, batch x head): S = Q K^T / sqrt(d), online softmax
              (base 2), O = softmax(S) ⊙ Z V; stores O (B, H, T, d) and L = m + log2(l) (B H, T)
    backward  one program per (BLOCK_N keys, batch x head), one pass over the queries at or below them:
              P = 2^(S log2 e - L), dV += (P ⊙ Z)^T dO, dP = (dO V^T) ⊙ Z, dS = P ⊙ (dP - delta),
              dK += dS^T Q, and dQ += dS K added to a float32 sum by atomics on every tile
              (FlashAttention-2's ``dQaccum``, flash_bwd_kernel.h), 5 products per tile
    delta     delta_i = rowsum(dO ⊙ O)_i; and dQ = sum / sqrt(d) cast to the input dtype (O(T d) each)

``Z``: attention dropout's keep mask scaled by 1 / (1 - p): one Philox-4x32-7 call per 16 keys of a row
(8-bit uniforms, FlashAttention-2's generator and rounds), kept where the uniform is >= round(256 p);
the scale is applied once per row of O and once to dP's tile.
"""

import math

import torch
import triton
import triton.language as tl

PHILOX_ROUNDS = tl.constexpr(7)
# Tiles (BLOCK_M, BLOCK_N, warps, stages) per (architecture, head dim) on a GPU; the interpreter's below.
# sm_90: tiles that spill no register under triton 3.9.0 and 3.7.1, with and without dropout.
# FlashAttention-2's own backward tiles spill here (triton 3.9.0, sm_90, no dropout: 128x128 on 8 warps at
# head dim 64, 112 bytes; 64x128 on 8 warps at 128, 220 bytes); the backward runs 64x64 on 4 warps and
# 16x128 on 8 (32x128 and 64x64 on 8 warps also compile without spills at 128 without dropout). sm_80 (A100 and the 99 KB class): the sm_90 tiles, not tuned (the model is Hopper's; they
# spill there, the compile report says how much).
GPU_BLOCKS = {
    ("sm_90", 64): dict(forward=(128, 128, 8, 2), backward=(64, 64, 4, 2)),
    ("sm_90", 128): dict(forward=(64, 64, 4, 2), backward=(16, 128, 8, 2)),
}
GPU_BLOCKS["sm_80", 64], GPU_BLOCKS["sm_80", 128] = GPU_BLOCKS["sm_90", 64], GPU_BLOCKS["sm_90", 128]
INTERPRETER_BLOCKS = dict(forward=(32, 16, 1, 1), backward=(16, 32, 1, 1))


@triton.jit
def _keep(seed, bh, rows, start_n, keep_threshold, M: tl.constexpr, N: tl.constexpr):
    """(M, N) whether dropout keeps entry (i, j), queries ``rows``, keys ``start_n ..`` (a multiple of
    16): counters ``(j // 16, i, bh, 0)``, key ``16 g + 4 w + b`` in byte ``b`` of word ``w``."""
    G: tl.constexpr = N // 16
    c0 = (start_n // 16 + tl.arange(0, G))[None, :] + rows[:, None] * 0  # (M, G)
    c1 = rows[:, None] + c0 * 0
    zero = c0 * 0
    w0, w1, w2, w3 = tl.philox(seed, c0, c1, zero + bh, zero, PHILOX_ROUNDS)
    words = tl.join(tl.join(w0, w2), tl.join(w1, w3))  # (M, G, 2, 2): [a, b] = w_(2a + b)
    shifts = (24 - tl.arange(0, 4) * 8).to(tl.uint32)
    on_top = words[:, :, :, :, None] << shifts[None, None, None, None, :]  # byte b on top
    return tl.reshape(on_top >= (keep_threshold.to(tl.uint32) << 24), [M, N])


@triton.jit
def _head_base(H, stride_b, stride_h):
    """``(bh, base)``: this program's ``bh = program_id(1)`` of B H and the int64 offset of its (batch, head)."""
    bh = tl.program_id(1)
    return bh, tl.cast(bh // H, tl.int64) * stride_b + tl.cast(bh % H, tl.int64) * stride_h


@triton.jit
def _seed(SEED, HAS_DROPOUT: tl.constexpr):
    """Attention dropout's Philox key (0 without dropout)."""
    seed = 0
    if HAS_DROPOUT:
        seed = tl.load(SEED)
    return seed


@triton.jit
def _tile(start, T, D: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr):
    """``(rows, dims, mask)``: rows ``start .. start + BLOCK - 1`` of a (T, D) matrix, ``0 .. BLOCK_D - 1``
    and the (BLOCK, BLOCK_D) mask of the entries inside it."""
    rows = start + tl.arange(0, BLOCK)
    dims = tl.arange(0, BLOCK_D)
    return rows, dims, (rows[:, None] < T) & (dims[None, :] < D)


@triton.jit
def _load(X, rows, dims, stride_t, stride_d, mask):
    """The (len(rows), len(dims)) tile of ``X`` (T, D) at ``rows``, 0 outside ``mask``."""
    return tl.load(X + rows[:, None] * stride_t + dims[None, :] * stride_d, mask=mask, other=0.0)


@triton.jit
def _forward_tile(acc, m_i, l_i, q, K, V, seed, rows, start_n, bh, stride_t, stride_d, T, qk_scale, keep_threshold,
                  CAUSAL: tl.constexpr, HAS_DROPOUT: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    cols, dims, kv_mask = _tile(start_n, T, D, BLOCK_N, BLOCK_D)
    k = _load(K, cols, dims, stride_t, stride_d, kv_mask)  # (BLOCK_N, BLOCK_D)
    v = _load(V, cols, dims, stride_t, stride_d, kv_mask)
    s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N), base 2
    if CAUSAL:
        s = tl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if HAS_DROPOUT:
        p = tl.where(_keep(seed, bh, rows, start_n, keep_threshold, BLOCK_M, BLOCK_N), p, 0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l_i


@triton.jit
def _forward_kernel(Q, K, V, Out, LSE, SEED, stride_b, stride_h, stride_t, stride_d, H, T, qk_scale,
                    keep_threshold, keep_scale, HAS_DROPOUT: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Keys 0 .. the diagonal for BLOCK_M queries: the tiles wholly below it, then those on it (masked);
    the last query tiles (the most keys) first."""
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    bh, base = _head_base(H, stride_b, stride_h)
    seed = _seed(SEED, HAS_DROPOUT)
    rows, dims, row_mask = _tile(start_m, T, D, BLOCK_M, BLOCK_D)
    q = _load(Q + base, rows, dims, stride_t, stride_d, row_mask)
    K += base
    V += base
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    below = ((start_m + 1) // BLOCK_N) * BLOCK_N  # keys of the tiles wholly at or below the diagonal
    for start_n in range(0, below, BLOCK_N):
        acc, m_i, l_i = _forward_tile(acc, m_i, l_i, q, K, V, seed, rows, start_n, bh, stride_t, stride_d, T, qk_scale,
                                      keep_threshold, False, HAS_DROPOUT, D, BLOCK_M, BLOCK_N, BLOCK_D)
    for start_n in range(below, tl.minimum(start_m + BLOCK_M, T), BLOCK_N):
        acc, m_i, l_i = _forward_tile(acc, m_i, l_i, q, K, V, seed, rows, start_n, bh, stride_t, stride_d, T, qk_scale,
                                      keep_threshold, True, HAS_DROPOUT, D, BLOCK_M, BLOCK_N, BLOCK_D)
    scale = 1.0 / l_i
    if HAS_DROPOUT:
        scale = scale * keep_scale
    tl.store(Out + base + rows[:, None] * stride_t + dims[None, :] * stride_d,
             (acc * scale[:, None]).to(Out.dtype.element_ty), mask=row_mask)
    tl.store(LSE + tl.cast(bh, tl.int64) * T + rows, m_i + tl.math.log2(l_i), mask=rows < T)


@triton.jit
def _delta_kernel(O, DO, Delta, stride_b, stride_h, stride_t, stride_d, H, T, D: tl.constexpr,
                  BLOCK: tl.constexpr, BLOCK_D: tl.constexpr):
    bh, base = _head_base(H, stride_b, stride_h)
    rows, dims, mask = _tile(tl.program_id(0) * BLOCK, T, D, BLOCK, BLOCK_D)
    offsets = base + rows[:, None] * stride_t + dims[None, :] * stride_d
    o = tl.load(O + offsets, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(Delta + tl.cast(bh, tl.int64) * T + rows, tl.sum(o * do, 1), mask=rows < T)


@triton.jit
def _backward_tile(dk, dv, k, v, Q, DO, DQ, LSE, Delta, seed, cols, start_n, start_m, bh, stride_t, stride_d, T,
                   qk_scale, keep_threshold, keep_scale, CAUSAL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                   D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """One query tile of the one-pass backward, keys as rows (``k q^T``: (BLOCK_N, BLOCK_M))."""
    rows, dims, row_mask = _tile(start_m, T, D, BLOCK_M, BLOCK_D)
    q = _load(Q, rows, dims, stride_t, stride_d, row_mask)  # (BLOCK_M, BLOCK_D)
    do = _load(DO, rows, dims, stride_t, stride_d, row_mask)
    lse = tl.load(LSE + rows, mask=rows < T, other=float("inf"))  # rows >= T: P = 0
    delta = tl.load(Delta + rows, mask=rows < T, other=0.0)
    s = tl.dot(k, tl.trans(q)) * qk_scale  # S^T, base 2
    p = tl.math.exp2(s - lse[None, :])  # P^T
    if CAUSAL:
        p = tl.where(rows[None, :] >= cols[:, None], p, 0.0)
    dp = tl.dot(v, tl.trans(do))  # (dO V^T)^T
    if HAS_DROPOUT:
        keep = tl.trans(_keep(seed, bh, rows, start_n, keep_threshold, BLOCK_M, BLOCK_N))
        dv += tl.dot((tl.where(keep, p, 0.0) * keep_scale).to(do.dtype), do)
        dp = tl.where(keep, dp * keep_scale, 0.0)
    else:
        dv += tl.dot(p.to(do.dtype), do)
    ds = (p * (dp - delta[None, :])).to(q.dtype)  # dS^T
    dk += tl.dot(ds, q)
    dq = tl.dot(tl.trans(ds), k)  # (BLOCK_M, BLOCK_D): this tile's share of dS K
    tl.atomic_add(DQ + rows[:, None] * D + dims[None, :], dq, mask=row_mask, sem="relaxed")
    return dk, dv


@triton.jit
def _backward_kernel(Q, K, V, DO, DQ, DK, DV, LSE, Delta, SEED, stride_b, stride_h, stride_t, stride_d, H, T,
                     qk_scale, sm_scale, keep_threshold, keep_scale, HAS_DROPOUT: tl.constexpr, D: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """dK, dV of BLOCK_N keys and their share of dQ (float32 sum ``DQ`` (B H, T, D)): the query tiles on
    the diagonal (masked), then those wholly below it."""
    start_n = tl.program_id(0) * BLOCK_N
    bh, base = _head_base(H, stride_b, stride_h)
    seed = _seed(SEED, HAS_DROPOUT)
    cols, dims, col_mask = _tile(start_n, T, D, BLOCK_N, BLOCK_D)
    k = _load(K + base, cols, dims, stride_t, stride_d, col_mask)
    v = _load(V + base, cols, dims, stride_t, stride_d, col_mask)
    Q += base
    DO += base
    DQ += tl.cast(bh, tl.int64) * T * D
    LSE += tl.cast(bh, tl.int64) * T
    Delta += tl.cast(bh, tl.int64) * T
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    lo = (start_n // BLOCK_M) * BLOCK_M
    above = tl.cdiv(start_n + BLOCK_N - 1, BLOCK_M) * BLOCK_M  # the first query tile wholly below
    for start_m in range(lo, tl.minimum(above, T), BLOCK_M):
        dk, dv = _backward_tile(dk, dv, k, v, Q, DO, DQ, LSE, Delta, seed, cols, start_n, start_m, bh, stride_t,
                                stride_d, T, qk_scale, keep_threshold, keep_scale, True, HAS_DROPOUT, D,
                                BLOCK_M, BLOCK_N, BLOCK_D)
    for start_m in range(above, T, BLOCK_M):
        dk, dv = _backward_tile(dk, dv, k, v, Q, DO, DQ, LSE, Delta, seed, cols, start_n, start_m, bh, stride_t,
                                stride_d, T, qk_scale, keep_threshold, keep_scale, False, HAS_DROPOUT, D,
                                BLOCK_M, BLOCK_N, BLOCK_D)
    offsets = base + cols[:, None] * stride_t + dims[None, :] * stride_d
    tl.store(DK + offsets, (dk * sm_scale).to(DK.dtype.element_ty), mask=col_mask)
    tl.store(DV + offsets, dv.to(DV.dtype.element_ty), mask=col_mask)


@triton.jit
def _dropout_mask_kernel(SEED, Out, T, keep_threshold, BLOCK: tl.constexpr):
    """Out (B H, T, T) int8: the keep mask every kernel regenerates (for tests)."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    start_n = tl.program_id(1) * BLOCK
    bh = tl.program_id(2)
    keep = _keep(tl.load(SEED), bh, rows, start_n, keep_threshold, BLOCK, BLOCK)
    cols = start_n + tl.arange(0, BLOCK)
    tl.store(Out + tl.cast(bh, tl.int64) * T * T + rows[:, None] * T + cols[None, :], keep.to(tl.int8),
             mask=(rows[:, None] < T) & (cols[None, :] < T))


def dropout_keep(dropout_p: float):
    """``(threshold, scale)``: kept where the 8-bit uniform is >= ``round(256 p)``, scaled by its inverse rate."""
    threshold = int(round(dropout_p * 256))
    if not 0 <= threshold < 256:
        raise ValueError(f"dropout_p {dropout_p} drops every entry at 8-bit thresholds")
    return threshold, 256.0 / (256 - threshold)


def _blocks(device: torch.device, head_dim: int):
    if device.type == "cpu":
        return INTERPRETER_BLOCKS
    major, _ = torch.cuda.get_device_capability(device)
    return GPU_BLOCKS["sm_90" if major >= 9 else "sm_80", 64 if head_dim <= 64 else 128]


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


class FlashStandIn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, dropout_p, seed, blocks):
        batch, heads, length, head_dim = q.shape
        q, k, v = (x.contiguous() for x in (q, k, v))
        cfg = blocks or _blocks(q.device, head_dim)
        threshold, keep_scale = dropout_keep(dropout_p)
        out = torch.empty_like(q)
        lse = torch.empty(batch * heads, length, device=q.device, dtype=torch.float32)
        sm_scale = 1.0 / math.sqrt(head_dim)
        block_m, block_n, warps, stages = cfg["forward"]
        _forward_kernel[(triton.cdiv(length, block_m), batch * heads)](
            q, k, v, out, lse, seed, *q.stride(), heads, length, sm_scale * math.log2(math.e), threshold, keep_scale,
            HAS_DROPOUT=dropout_p > 0, D=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_block_d(head_dim),
            num_warps=warps, num_stages=stages)
        ctx.save_for_backward(q, k, v, out, lse, seed)
        ctx.dropout_p, ctx.cfg = dropout_p, cfg
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, seed = ctx.saved_tensors
        batch, heads, length, head_dim = q.shape
        grad_out = grad_out.contiguous()
        cfg = ctx.cfg
        threshold, keep_scale = dropout_keep(ctx.dropout_p)
        sm_scale = 1.0 / math.sqrt(head_dim)
        delta = torch.empty_like(lse)
        _delta_kernel[(triton.cdiv(length, 64), batch * heads)](
            out, grad_out, delta, *q.stride(), heads, length, D=head_dim, BLOCK=64, BLOCK_D=_block_d(head_dim))
        dq_sum = torch.zeros(batch * heads, length, head_dim, device=q.device, dtype=torch.float32)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        block_m, block_n, warps, stages = cfg["backward"]
        _backward_kernel[(triton.cdiv(length, block_n), batch * heads)](
            q, k, v, grad_out, dq_sum, dk, dv, lse, delta, seed, *q.stride(), heads, length,
            sm_scale * math.log2(math.e), sm_scale, threshold, keep_scale, HAS_DROPOUT=ctx.dropout_p > 0,
            D=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_block_d(head_dim), num_warps=warps,
            num_stages=stages)
        dq = (dq_sum * sm_scale).view(batch, heads, length, head_dim).to(q.dtype)
        return dq, dk, dv, None, None, None


def flash_standin_attention(q, k, v, dropout_p: float = 0.0, seed: torch.Tensor = None, blocks: dict = None):
    """Causal ``softmax(Q K^T / sqrt(d)) ⊙ Z V`` for q, k, v (B, H, T, d), d <= 128; ``seed``: an int64
    tensor of one element (attention dropout's Philox key; drawn from torch's generator if None);
    ``blocks``: tiles as in ``GPU_BLOCKS`` (default: the device's, or the interpreter's on CPU)."""
    if seed is None:
        seed = torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64).to(q.device)
    return FlashStandIn.apply(q, k, v, float(dropout_p), seed, blocks)


def dropout_mask(seed: torch.Tensor, batch_heads: int, length: int, dropout_p: float) -> torch.Tensor:
    """(B H, T, T) bool: the entries the kernels keep at rate ``dropout_p`` under ``seed``."""
    threshold, _ = dropout_keep(dropout_p)
    out = torch.empty(batch_heads, length, length, dtype=torch.int8, device=seed.device)
    grid = (triton.cdiv(length, 16), triton.cdiv(length, 16), batch_heads)
    _dropout_mask_kernel[grid](seed, out, length, threshold, BLOCK=16)
    return out.bool()
