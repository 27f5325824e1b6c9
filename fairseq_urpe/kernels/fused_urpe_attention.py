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
one gather, and add per-diagonal sums. The deterministic backward (``deterministic``) adds nothing by
atomics: no far share, no far dQ in dK/dV, and the dQ kernel stores its table gradients as partial rows,
summed in torch in a fixed order (``fold_partial_rows``). Padded keys
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
with the most keys start first.

The files: this one holds the autograd Function and the launches; ``forward_kernel.py`` and
``backward_kernels.py`` the ``@triton.jit`` kernels, ``score_tiles.py`` the tile arithmetic they share;
``tiles.py`` the tiles per architecture and the far-tile arithmetic (plain Python); ``dropout_rate.py``
the rate the 8-bit thresholds run. They import only torch and triton.
"""

import math
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from .backward_kernels import delta_kernel, dkdv_kernel, dq_kernel
from .dropout_rate import dropout_keep
from .forward_kernel import forward_kernel
from .reference import check_inputs
from .score_tiles import dropout_mask_kernel
from .tiles import (MAX_HEAD_DIM, MAX_TILE, block_d, blocks_for, dq_tile, far_flags, far_share_fits, one_pass,
                    partial_rows, precision, table_reach, tile, uses_far_share)

LOG2E = 1.4426950408889634  # exp(x) = exp2(x log2(e))


def _accumulator(dtype: torch.dtype):
    return (tl.float64, torch.float64) if dtype == torch.float64 else (tl.float32, torch.float32)


def _scores_base(dtype: torch.dtype):
    """(EXP2, log2e): base-2 softmax with log2(e) folded into the scale, except in float64 (base e, so
    that float64 runs hold the exact scale)."""
    return (False, 1.0) if dtype == torch.float64 else (True, LOG2E)


class FarShare(NamedTuple):
    """The far tiles' share of each row, stored by the forward for the far table gradients (see
    :func:`~.tiles.far_share_applies`): ``out`` ``(B * H, T, d)`` in q's dtype, ``row_max``, ``row_sum``
    ``(B * H, T)`` in the accumulator's."""

    out: torch.Tensor
    row_max: torch.Tensor
    row_sum: torch.Tensor

    @staticmethod
    def empty(q: torch.Tensor, row_max: torch.Tensor) -> "FarShare":
        batch, heads, length, head_dim = q.shape
        out = q.new_empty(batch * heads, length, head_dim)
        return FarShare(out, torch.empty_like(row_max), torch.empty_like(row_max))


def launch_variant(q, bias_table=None, c_table=None, key_padding_mask=None, tables_learn=False, blocks=None,
                   deterministic=False) -> tuple:
    """The constexprs that the call's sizes (not its configuration) select: the forward's ``FAR_SUMS``
    and the backward's far-tile constexprs (:func:`far_flags`), as the launches of this call pass them."""
    cfg = blocks_for(q.device, q.size(3), q.dtype, blocks)
    far_share = not deterministic and uses_far_share(cfg, q.size(2), bias_table, c_table, key_padding_mask,
                                                     tables_learn)
    flags = far_flags(cfg, far_share)
    return (("forward", far_share), *((name, tuple(sorted(flags[name].items()))) for name in ("dkdv", "dq")))


def launch_forward(q, k, v, bias_table, c_table, pad, out, row_max, row_sum, scale: float, cfg: dict,
                   dropout_p: float = 0.0, seed: Optional[torch.Tensor] = None,
                   far: Optional[FarShare] = None) -> None:
    """Run the forward kernel: ``out`` (laid out like ``q``), ``row_max`` (in base 2, except float64) and
    ``row_sum`` ``(B * H, T)``; and the far tiles' share into ``far`` where given.

    ``bias_table``, ``c_table`` ``(H, n)`` (module doc) in the accumulator's dtype, ``pad`` ``(B, T)`` int8, or ``None``;
    ``seed`` a one-element int64 tensor when ``dropout_p > 0``.
    """
    batch, heads, length, head_dim = q.shape
    acc_tl, _ = _accumulator(q.dtype)
    exp2, log2e = _scores_base(q.dtype)
    threshold, keep_scale = dropout_keep(dropout_p)
    dummy = row_max
    block_m, block_n, warps, stages = tile(cfg, "forward")
    forward_kernel[(triton.cdiv(length, block_m), batch * heads)](
        q, k, v, _or(bias_table, dummy), _or(c_table, dummy), _or(pad, dummy), _or(seed, dummy), out, row_max, row_sum,
        *(far or (dummy, dummy, dummy)),
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        _row_stride(bias_table), _row_stride(c_table), _row_stride(pad),
        heads, length, *table_reach(length, bias_table, c_table), scale * log2e, log2e, threshold, keep_scale,
        HAS_BIAS=bias_table is not None, HAS_C=c_table is not None, HAS_PAD=pad is not None, HAS_DROPOUT=dropout_p > 0,
        FAR_SUMS=far is not None, D=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(head_dim),
        PRECISION=precision(q.dtype), ACC=acc_tl, EXP2=exp2, num_warps=warps, num_stages=stages,
    )


def launch_delta(out, grad_out, delta, far: Optional[FarShare] = None, row_max=None, row_sum=None, bias_table=None,
                 c_table=None, d_bias_table=None, d_c_table=None) -> None:
    """``delta`` ``(B * H, T)`` in the accumulator's dtype: ``D_i = dO_i . O_i``; with ``far`` (the
    forward's), also add the far tiles' table gradients into ``d_bias_table``, ``d_c_table`` (those wanted), which
    :func:`launch_backward` given the same ``far`` then leaves out."""
    batch, heads, length, head_dim = out.shape
    acc_tl, _ = _accumulator(out.dtype)
    exp2, _ = _scores_base(out.dtype)
    block = 16 if out.device.type == "cpu" else 64
    dummy = delta
    last_b, last_c, _ = table_reach(length, bias_table, c_table)
    delta_kernel[(triton.cdiv(length, block), batch * heads)](
        out, grad_out, delta, *(far or (dummy, dummy, dummy)), _or(row_max, dummy), _or(row_sum, dummy),
        _or(c_table, dummy), _or(d_bias_table, dummy), _or(d_c_table, dummy),
        *out.stride(), *grad_out.stride(), _row_stride(bias_table), _row_stride(c_table), heads, length, last_b,
        last_c,
        HAS_C=c_table is not None, FAR_SUMS=far is not None, BIAS_GRAD=far is not None and d_bias_table is not None,
        C_GRAD=far is not None and d_c_table is not None,
        D=head_dim, BLOCK=block, BLOCK_D=block_d(head_dim), ACC=acc_tl, EXP2=exp2, num_warps=4 if block > 16 else 1,
    )


def launch_backward(q, k, v, bias_table, c_table, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias_table,
                    d_c_table, scale: float, cfg: dict, dropout_p: float = 0.0, seed: Optional[torch.Tensor] = None,
                    far: Optional[FarShare] = None, far_dq_sum: Optional[torch.Tensor] = None,
                    deterministic: bool = False) -> None:
    """Run the two backward kernels: ``dq``, ``dk``, ``dv`` (laid out like q, k, v), and add the table
    gradients (in the dQ kernel) into ``d_bias_table``, ``d_c_table`` (zeroed, laid out like ``bias_table``,
    ``c_table``; ``None``: not wanted).

    ``delta`` ``(B * H, T)``: ``D_i = dO_i . O_i`` (:func:`launch_delta`). With ``far`` (the forward's, and
    given to :func:`launch_delta`, which added the far tiles' table gradients) the dQ kernel adds only the
    near tiles'; and where :func:`~.tiles.far_dq_fits`, the dK/dV kernel adds the far tiles' dQ (on
    :func:`~.tiles.far_dq_grid`) to ``far_dq_sum``, a zeroed ``(B * H, T, d)`` tensor in the accumulator's dtype
    (allocated here if not given), which the dQ kernel reads instead of running those tiles.

    With tiles ``cfg`` that ask for it (:func:`~.tiles.one_pass`) and no ``deterministic``, the one-pass backward:
    the dK/dV kernel adds every tile's dQ (to a float32 sum, scaled into ``dq`` after) and table gradients by
    atomics, and the dQ kernel does not run.

    ``deterministic`` (no ``far``): no atomics anywhere; the dQ kernel stores its table gradients as partial rows
    per program, which :func:`fold_partial_rows` adds into ``d_bias_table``, ``d_c_table`` in a fixed order, so
    every gradient is the same bit for bit from run to run.
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
        _row_stride(bias_table), _row_stride(c_table), _row_stride(pad),
        heads, length, *table_reach(length, bias_table, c_table), scale * log2e, log2e, threshold, keep_scale,
    )
    flags = dict(HAS_BIAS=bias_table is not None, HAS_C=c_table is not None, HAS_PAD=pad is not None,
                 HAS_DROPOUT=dropout_p > 0, D=head_dim, BLOCK_D=block_d(head_dim), PRECISION=precision(q.dtype),
                 ACC=acc_tl, EXP2=exp2)
    inputs = (q, k, v, _or(bias_table, dummy), _or(c_table, dummy), _or(pad, dummy), _or(seed, dummy), grad_out,
              row_max, row_sum, delta)
    if far is not None and not far_share_fits(cfg, bias_table is not None or c_table is not None, pad is not None):
        raise ValueError("far: the forward's far share gives wrong table gradients here (far_share_fits)")
    if deterministic and far is not None:
        raise ValueError("deterministic: the far share adds its table gradients by atomics; pass far=None")
    single = one_pass(cfg) and not deterministic
    if single and far is not None:
        raise ValueError("the one-pass backward sums its far tiles' table gradients: pass far=None")
    far_consts = far_flags(cfg, far is not None)
    far_dq = far_consts["dq"]["FAR_DQ"]
    if (far_dq or single) and far_dq_sum is None:
        far_dq_sum = q.new_zeros(batch * heads, length, head_dim, dtype=row_max.dtype)
    far_dq_sum = far_dq_sum if far_dq or single else dummy
    block_m, block_n, warps, stages = tile(cfg, "dkdv")
    dkdv_kernel[(triton.cdiv(length, block_n), batch * heads)](
        *inputs, dk, dv, far_dq_sum, *common, D_BIAS_TABLE=_or(d_bias_table, dummy), D_C_TABLE=_or(d_c_table, dummy),
        ONE_PASS=single, BIAS_GRAD=single and d_bias_table is not None, C_GRAD=single and d_c_table is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages, **far_consts["dkdv"], **flags,
    )
    if single:  # dQ = scale dS K, summed over the key tiles
        dq.copy_(far_dq_sum.view(batch, heads, length, head_dim).mul_(scale))
        return
    partials = deterministic and (d_bias_table is not None or d_c_table is not None)
    block_m, block_n, warps, stages = dq_tile(cfg, partials)
    programs = triton.cdiv(length, block_m)
    rows = partial_rows(cfg, length, table_reach(length, bias_table, c_table)[2],
                        (far_consts["dq"]["FAR_M"], far_consts["dq"]["FAR_N"])) if partials else 1
    # where the dQ kernel adds each table's gradient: the table's, or its partial rows
    targets = [torch.zeros(batch * heads, programs, rows, 2 * max(block_m, block_n), device=q.device,
                           dtype=row_max.dtype) if partials and g is not None else g for g in (d_bias_table, d_c_table)]
    dq_kernel[(programs, batch * heads)](
        *inputs, dq, _or(targets[0], dummy), _or(targets[1], dummy), far_dq_sum, *common, PARTIAL_ROWS=rows,
        BIAS_GRAD=d_bias_table is not None, C_GRAD=d_c_table is not None, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=warps, num_stages=stages, PARTIALS=partials, **far_consts["dq"], **flags,
    )
    if partials:
        for grad, partial in zip((d_bias_table, d_c_table), targets):
            if grad is not None:
                last = min(grad.size(1), length) - 1
                grad[:, :last + 1] += fold_partial_rows(partial, heads, last, block_m, block_n)


def fold_partial_rows(partial: torch.Tensor, heads: int, last: int, block_m: int, block_n: int) -> torch.Tensor:
    """``(H, last + 1)``: a table's gradient from the dQ kernel's partial rows ``(B * H, programs, rows, 2 L)``
    (``L``, ``g`` the larger and the smaller of ``block_m``, ``block_n``; row ``j < rows - 1`` holds distances
    ``j g - 2 L + t`` at entry ``t``, the last row the far tiles' sum at entry 0), in a fixed order: summed over
    the batch and the programs, each row added at its offset (``2 L / g`` shifted sums), distances past ``last``
    and the far sums into entry ``last``, negative distances dropped."""
    big, g = max(block_m, block_n), min(block_m, block_n)
    batch = partial.size(0) // heads
    rows = partial.view(batch, heads, *partial.shape[1:]).sum((0, 2))  # (H, rows, 2 L)
    near, far = rows[:, :-1], rows[:, -1, 0]
    count, shifts = near.size(1), 2 * big // g
    dense = near.new_zeros(heads, count + shifts, g)  # entry (a, b): distance a g + b - 2 L
    for shift in range(shifts):
        dense[:, shift:shift + count] += near[:, :, shift * g:(shift + 1) * g]
    by_distance = dense.view(heads, -1)[:, 2 * big:]  # distances 0, 1, ...
    out = near.new_zeros(heads, last + 1)
    kept = min(last, by_distance.size(1))
    out[:, :kept] = by_distance[:, :kept]
    out[:, last] += by_distance[:, last:].sum(1) + far
    return out


def _or(x, default):
    return default if x is None else x


def _row_stride(x) -> int:
    return 0 if x is None else x.stride(0)


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
    dropout_mask_kernel[(triton.cdiv(length, block), batch * heads)](seed, out, length, threshold, keep_scale,
                                                                      BLOCK=block)
    return out.view(batch, heads, length, length)


def new_dropout_seed(device: torch.device) -> torch.Tensor:
    """A one-element int64 seed drawn from torch's default generator of ``device`` (``--seed`` fixes it)."""
    return torch.randint(0, 2**62, (1,), device=device, dtype=torch.int64)


class FusedCausalURPEAttention(torch.autograd.Function):
    """Autograd wrapper of the Triton kernels; use :func:`fused_causal_urpe_attention`."""

    @staticmethod
    def forward(ctx, q, k, v, bias_table, c_table, key_padding_mask, scale, dropout_p, seed, blocks,
                tables_learn, deterministic):
        batch, heads, length, head_dim = q.shape
        _, acc_torch = _accumulator(q.dtype)
        cfg = blocks_for(q.device, head_dim, q.dtype, blocks)
        ctx.table_dtypes = tuple(t.dtype if t is not None else None for t in (bias_table, c_table))
        bias_table, c_table = (t.to(acc_torch).contiguous() if t is not None else None for t in (bias_table, c_table))
        pad = key_padding_mask.to(torch.int8).contiguous() if key_padding_mask is not None else None
        out = _like(q)
        row_max = torch.empty(batch * heads, length, device=q.device, dtype=acc_torch)
        row_sum = torch.empty_like(row_max)
        far_share = not deterministic and uses_far_share(cfg, length, bias_table, c_table, pad, tables_learn)
        far = FarShare.empty(q, row_max) if far_share else None
        launch_forward(q, k, v, bias_table, c_table, pad, out, row_max, row_sum, scale, cfg, dropout_p, seed, far)
        ctx.save_for_backward(q, k, v, out, bias_table, c_table, pad, row_max, row_sum, seed,
                              *(far or (None, None, None)))
        ctx.scale, ctx.cfg, ctx.dropout_p, ctx.deterministic = scale, cfg, dropout_p, deterministic
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, bias_table, c_table, pad, row_max, row_sum, seed, *far = ctx.saved_tensors
        far = FarShare(*far) if far[0] is not None else None
        grad_out = _kernel_layout(grad_out)
        delta = torch.empty_like(row_max)  # (B * H, T): D_i
        # (H, n), where wanted
        d_bias_table = torch.zeros_like(bias_table) if bias_table is not None and ctx.needs_input_grad[3] else None
        d_c_table = torch.zeros_like(c_table) if c_table is not None and ctx.needs_input_grad[4] else None
        launch_delta(out, grad_out, delta, far, row_max, row_sum, bias_table, c_table, d_bias_table, d_c_table)
        dq, dk, dv = _like(q), _like(k), _like(v)
        launch_backward(q, k, v, bias_table, c_table, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias_table,
                        d_c_table, ctx.scale, ctx.cfg, ctx.dropout_p, seed, far, deterministic=ctx.deterministic)
        bias_dtype, c_dtype = ctx.table_dtypes
        return (
            dq, dk, dv,
            d_bias_table.to(bias_dtype) if d_bias_table is not None else None,
            d_c_table.to(c_dtype) if d_c_table is not None else None,
            None, None, None, None, None, None, None,
        )


def fused_causal_urpe_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias_table: Optional[torch.Tensor] = None,
    c_table: Optional[torch.Tensor] = None,
    key_padding_mask: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    dropout_p: float = 0.0,
    dropout_seed: Optional[torch.Tensor] = None,
    blocks: Optional[dict] = None,
    deterministic: Optional[bool] = None,
) -> torch.Tensor:
    """Causal ``dropout(softmax(scale Q K^T + B) ⊙ C) V`` without a ``T x T`` matrix, forward and backward.

    Args:
        q, k, v: ``(B, H, T, d)``, float16, bfloat16 or float32 (float64 under Triton's interpreter),
            any strides; ``d <= 128``.
        bias_table: ``(H, n)``, ``n >= 1``: ``B_ij = bias_table[h, min(i - j, n - 1)]`` (the
            last entry holds for every distance past it), or ``None``. Pass a table that is constant from
            some distance on only up to there: the tiles past it run without table reads.
        c_table: ``(H, n)``: ``C_ij = c_table[h, min(i - j, n - 1)]``, or ``None`` (``C = 1``).
        key_padding_mask: ``(B, T)`` bool, true at padded keys, or ``None``.
        scale: multiplies ``Q K^T``; default ``1 / sqrt(d)``.
        dropout_p: attention dropout on ``A ⊙ C``, run at ``round(256 p) / 256``, kept entries scaled by
            the inverse of the keep rate (:mod:`.dropout_rate`); a ``p`` whose 8-bit rate is more than 10%
            off (e.g. 0.001, 0.01) raises ``ValueError``.
        dropout_seed: one-element int64 tensor on q's device choosing the mask (see
            :func:`attention_dropout_mask`); default: drawn from torch's generator (:func:`new_dropout_seed`).
        blocks: overrides of the tile choices (keys and values as in ``tiles.INTERPRETER_BLOCKS``; a tile's
            pipeline stages may be left out).
        deterministic: a backward without atomics, the same bit for bit from run to run (the table gradients
            as partial rows added up in a fixed order, :func:`fold_partial_rows`; no far share, no far dQ in
            the dK/dV kernel); default: ``torch.are_deterministic_algorithms_enabled()``.

    Returns ``(B, H, T, d)`` laid out like ``q``; gradients reach q, k, v and both tables (float32
    accumulation). Without ``deterministic``, diagonal sums and, where :func:`~.tiles.far_dq_fits`, the far tiles'
    dQ are added by atomics, so table gradients and dQ are not bitwise deterministic.
    """
    batch, heads, length, head_dim = q.shape
    check_inputs(q, k, v, bias_table, c_table, key_padding_mask)  # the reference's contract
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head dim {head_dim} exceeds the kernel's maximum of {MAX_HEAD_DIM}")
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
    tables = (bias_table, c_table)
    tables_learn = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tables)
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    return FusedCausalURPEAttention.apply(q, k, v, bias_table, c_table, key_padding_mask, scale,
                                          float(dropout_p), seed, blocks, tables_learn, bool(deterministic))
