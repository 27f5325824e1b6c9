"""The fused kernels' tiles and far-tile arithmetic, in plain Python (torch only, no triton): which tiles
each architecture runs, which key tiles are *far* (wholly at or past both tables' last entries), and the
far-tile constexprs the launches pass.

A tile config ``cfg`` is a dict: ``forward``, ``dkdv``, ``dq``: ``(BLOCK_M queries, BLOCK_N keys, warps[,
pipeline stages])`` of each kernel; ``far_dq``: ``"dkdv"`` where dK/dV's far tiles add their dQ by atomics
(:func:`far_dq_fits`), ``"dq"`` otherwise. Table gradients are added in the dQ kernel (by diagonal sums
on near tiles, by one running scalar per table on far ones) or, with the forward's far share, for far
tiles in the delta kernel.
"""

import math
from typing import Optional

import torch

MAX_HEAD_DIM = 128
MAX_TILE = 128  # the most rows (keys) of a tile: in-tile offsets (MAX_TILE - 1) * row stride + d stay int32

# Tiles (BLOCK_M queries, BLOCK_N keys, warps, pipeline stages) of the three kernels per architecture
# (sm_90: H100/H200; sm_80: A100, 163 KB of shared memory per block; sm_86: sm_86/87/89 and older, 99 KB),
# kind of product (16-bit, TF32 or full float32) and head dim (<= 64 or wider). Chosen on a machine without
# a GPU with python -m benchmarks.fused_kernel --compile-check (all tables and padding on, with and without
# dropout): the largest tiles that ptxas compiles without register spills under both tested tritons
# (3.7.1, 3.9.0), with wgmma on sm_90 wherever there are tensor cores to use. The dK/dV tile holds 32 to
# 128 keys; its query step is 16 at head dim 128 (32 spills on sm_90). dQ's tiles divide the forward's
# (the far share needs it). 16-bit is checked on every architecture (sm_86 takes smaller dK/dV tiles than
# sm_80's, which spill there; at head dim 128 its forward and dQ take 16 keys, as 64x32 and 16x32 spill 8
# bytes without padding in float16 under one triton or the other); TF32 and float32 (not what training
# runs) on sm_90 only: TF32 at head dim 128 spills a little in dK/dV with any tile that keeps wgmma.
# "far_dq": "dkdv" (where the far share applies, far_dq_fits): dK/dV's far tiles add their dQ by atomics
# and dQ's kernel skips them; set where that compiles without spills under both tritons (without padding,
# the only case it runs in) and the compile report prices it below dQ's far loop (sm_80/86 at head dim 128
# spill with it). Untimed: python -m benchmarks.fused_kernel --blocks tries others on a GPU.
GPU_BLOCKS = {
    ("sm_90", "16-bit", 64): dict(forward=(128, 64, 8, 2), dkdv=(32, 128, 8, 2), dq=(64, 32, 4, 2), far_dq="dkdv"),
    ("sm_90", "16-bit", 128): dict(forward=(128, 32, 8, 2), dkdv=(16, 64, 8, 2), dq=(64, 16, 4, 2), far_dq="dkdv"),
    ("sm_80", "16-bit", 64): dict(forward=(128, 32, 8, 2), dkdv=(16, 128, 8, 2), dq=(128, 16, 8, 2), far_dq="dkdv"),
    ("sm_80", "16-bit", 128): dict(forward=(64, 32, 8, 2), dkdv=(16, 32, 8, 2), dq=(16, 32, 4, 1)),
    ("sm_86", "16-bit", 64): dict(forward=(128, 32, 8, 2), dkdv=(16, 64, 8, 2), dq=(128, 16, 8, 2), far_dq="dkdv"),
    ("sm_86", "16-bit", 128): dict(forward=(64, 16, 8, 2), dkdv=(16, 32, 8, 2), dq=(16, 16, 4, 1)),
    ("sm_90", "tf32", 64): dict(forward=(128, 32, 8, 2), dkdv=(16, 64, 8, 2), dq=(128, 32, 8, 2)),
    ("sm_90", "tf32", 128): dict(forward=(128, 32, 8, 2), dkdv=(32, 64, 8, 2), dq=(64, 16, 8, 2)),
    ("sm_90", "float32", 64): dict(forward=(32, 32, 4, 2), dkdv=(16, 32, 4, 2), dq=(64, 32, 8, 2)),  # no tensor cores
    ("sm_90", "float32", 128): dict(forward=(32, 16, 4, 2), dkdv=(16, 32, 4, 2), dq=(32, 16, 4, 2)),
}
# Under the interpreter: small tiles, both shapes of dK/dQ tiles, so tests exercise both shears; dQ's
# tiles divide the forward's, so that the far share (far_share_applies) runs by default.
INTERPRETER_BLOCKS = dict(forward=(32, 16, 1, 1), dkdv=(16, 32, 1, 1), dq=(32, 16, 1, 1), far_dq="dkdv")


def architecture(capability) -> str:
    """The tile table's architecture for a compute capability ``(major, minor)``: sm_90 from Hopper on,
    sm_80 for the A100's 8.0, sm_86 (99 KB of shared memory per block, or less) otherwise."""
    if tuple(capability) >= (9, 0):
        return "sm_90"
    return "sm_80" if tuple(capability) == (8, 0) else "sm_86"


def precision(dtype: torch.dtype) -> str:
    """float32 matmuls as torch does them: TF32 only where torch allows it for CUDA matmuls."""
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def gpu_blocks(head_dim: int, dtype: torch.dtype, product: Optional[str] = None, capability=None) -> dict:
    """The tiles the kernels use on a GPU of ``capability`` (default: the current device's, or sm_90 where
    there is none) for this head dim and dtype (float32: TF32 products where torch allows them now, or as
    ``product``, "tf32" or "ieee", says)."""
    product = product or precision(dtype)
    kind = {"tf32": "tf32", "ieee": "float32"}[product] if dtype == torch.float32 else "16-bit"
    if capability is None:
        capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    arch = architecture(capability)
    width = 64 if head_dim <= 64 else 128
    tiles = GPU_BLOCKS.get((arch, kind, width), GPU_BLOCKS["sm_90", kind, width])
    return {"far_dq": "dq", **tiles}


def blocks_for(device: torch.device, head_dim: int, dtype: torch.dtype, blocks: Optional[dict] = None) -> dict:
    """The tile config of a call on ``device`` (the interpreter's on CPU), with ``blocks``' overrides."""
    if device.type == "cpu":
        chosen = dict(INTERPRETER_BLOCKS)
    else:
        chosen = gpu_blocks(head_dim, dtype, capability=torch.cuda.get_device_capability(device))
    chosen.update(blocks or {})
    return chosen


def tile(cfg: dict, kernel: str):
    """(BLOCK_M, BLOCK_N, warps, stages) of ``kernel``; stages default to 2 (1 under the interpreter)."""
    tiles = tuple(cfg[kernel])
    return tiles if len(tiles) == 4 else tiles + (cfg.get("num_stages", 2),)


def dq_tile(cfg: dict, deterministic: bool):
    """dQ's :func:`tile`; the deterministic backward's unpipelined (stages 1): pipelined, its dQ spills on sm_90
    at head dim 64 with padding (12-16 bytes at 255 registers, triton 3.9.0), unpipelined it holds 236-245."""
    block_m, block_n, warps, stages = tile(cfg, "dq")
    return block_m, block_n, warps, 1 if deterministic else stages


def block_d(head_dim: int) -> int:
    """The head dim padded to a power of 2, at least 16 (a tile's columns)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def table_reach(length: int, bias_table=None, c_table=None):
    """``(LAST_B, LAST_C, FAR)`` of a call: each table's last entry read, ``min(n, T) - 1`` for an ``(H, n)``
    table (distances past it read it), and the distance from which both are constant, so that key tiles
    wholly at or past it are far tiles (``T`` without tables: no far tiles)."""
    last = [min(t.size(1), length) - 1 if t is not None else 0 for t in (bias_table, c_table)]
    present = [n for n, t in zip(last, (bias_table, c_table)) if t is not None]
    return last[0], last[1], max(present) if present else length


def far_tiles(kernel: str, length: int, far: int, block_m: int, block_n: int, grid=None) -> int:
    """How many (query tile, key tile) pairs of one (batch, head) ``kernel`` ("forward", "dq" or "dkdv")
    runs as far tiles at ``FAR = far``, with tiles of ``block_m`` queries and ``block_n`` keys: the
    kernels' own loop bounds (forward and dQ: key tiles before ``max(start_m - FAR + 1, 0) // BLOCK_N``
    tiles; dK/dV: query tiles from ``ceil((start_n + BLOCK_N - 1 + FAR) / BLOCK_M)`` on). On a ``grid``
    ``(FAR_M, FAR_N)`` (``key_tile_ranges``): the tiles within the whole ``FAR_N``-blocks of keys at
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


def far_dq_fits(cfg: dict) -> bool:
    """Whether tiles ``cfg`` ask for the far tiles' dQ in the dK/dV kernel (``far_dq="dkdv"``) and allow
    it: dK/dV's query tiles divide the forward's. Used where the far share is (:func:`far_share_applies`):
    the dK/dV kernel, which computes dS on the far tiles anyway, adds ``dS K`` to a float32 sum by relaxed
    atomics, so dQ's kernel skips its far tiles (there, most of its work) and reads the sum."""
    return cfg.get("far_dq", "dq") == "dkdv" and tile(cfg, "forward")[0] % tile(cfg, "dkdv")[0] == 0


def far_dq_grid(cfg: dict):
    """``(FAR_M, FAR_N)``: the blocks of the far tiles whose dQ the dK/dV kernel adds (:func:`far_dq_fits`):
    the forward's query tiles by whole dK/dV key tiles, ``FAR_N = lcm`` of the forward's and dK/dV's
    BLOCK_N. Those blocks lie within the forward's far tiles (``key_tile_ranges``), so the dQ kernel runs
    the forward's far tiles past them."""
    (fm, fn), kn = tile(cfg, "forward")[:2], tile(cfg, "dkdv")[1]
    return fm, math.lcm(fn, kn)


def far_flags(cfg: dict, far_share: bool) -> dict:
    """The backward kernels' far-tile constexprs under tiles ``cfg``, with or without the forward's far
    share: ``{"dkdv": FAR_DQ, FAR_M, FAR_N; "dq": FAR_SUMS, FAR_DQ, FAR_M, FAR_N, DQ_FAR_N}``. dQ's far
    tiles are the forward's with the far share (its own otherwise), dK/dV's those on :func:`far_dq_grid`
    where :func:`far_dq_fits` (FAR_M, FAR_N unused otherwise)."""
    far_dq = far_share and far_dq_fits(cfg)
    far_m, far_n = tile(cfg, "forward" if far_share else "dq")[:2]
    dq_far_m, dq_far_n = far_dq_grid(cfg) if far_dq else (far_m, far_n)
    return {"dkdv": dict(FAR_DQ=far_dq, FAR_M=dq_far_m, FAR_N=dq_far_n),
            "dq": dict(FAR_SUMS=far_share, FAR_DQ=far_dq, FAR_M=far_m, FAR_N=far_n, DQ_FAR_N=dq_far_n)}


# The one-pass backward's dK/dV tiles on sm_90 (16-bit), by head-dim width: the largest of a scan of 16 shapes
# (`benchmarks.fused_kernel --compile-check --one-pass`, docs/performance.md) that compile without spills under
# triton 3.9.0, without and with padding and dropout at 64; at 128 without them (16 x 32: 40 bytes with both).
ONE_PASS_BLOCKS = {64: dict(backward="one_pass", dkdv=(16, 64, 4, 1)), 128: dict(backward="one_pass", dkdv=(16, 32, 4, 1))}


def one_pass(cfg: dict) -> bool:
    """Whether tiles ``cfg`` ask for the one-pass backward (``backward="one_pass"``; default ``"split"``): the
    dK/dV kernel adds every tile's dQ and table gradients by atomics, and no dQ kernel runs."""
    if cfg.get("backward", "split") not in ("split", "one_pass"):
        raise ValueError(f"blocks: backward must be 'split' or 'one_pass'; got {cfg['backward']!r}")
    return cfg.get("backward", "split") == "one_pass"


def far_share_fits(cfg: dict, tables: bool, padding: bool) -> bool:
    """Whether the far share gives the right far table gradients under tiles ``cfg``: with a table, no key
    padding (a padded key is in P's far share but passes no bias gradient), dQ tiles that divide the
    forward's (so that both see the same keys as far), and the split backward (the one-pass one sums its far
    tiles' table gradients itself)."""
    (fm, fn), (qm, qn) = tile(cfg, "forward")[:2], tile(cfg, "dq")[:2]
    return tables and not padding and fm % qm == 0 and fn % qn == 0 and not one_pass(cfg)


def far_share_applies(cfg: dict, length: int, bias_table=None, c_table=None, pad=None) -> bool:
    """Whether the far tiles' table gradients come from the forward's far share (``FarShare``, added by
    the delta kernel) instead of sums inside the dQ kernel's far loop: where it fits
    (:func:`far_share_fits`) and the call has far tiles at all."""
    if not far_share_fits(cfg, bias_table is not None or c_table is not None, pad is not None):
        return False
    fm, fn = tile(cfg, "forward")[:2]
    return far_tiles("forward", length, table_reach(length, bias_table, c_table)[2], fm, fn) > 0


def uses_far_share(cfg: dict, length: int, bias_table, c_table, pad, tables_learn: bool) -> bool:
    """Whether the forward stores the far share (``FAR_SUMS``): table gradients wanted and
    :func:`far_share_applies`."""
    return tables_learn and far_share_applies(cfg, length, bias_table, c_table, pad)


def partial_rows(cfg: dict, length: int, far: int, grid) -> int:
    """Rows of partial table gradients per dQ program in the deterministic backward: one per diagonal offset
    ``(base + L) / g`` of the program's near and diagonal key tiles (``base = start_m - start_n``, ``L``, ``g`` the
    larger and the smaller side of dQ's tile), the most any program of ``length`` queries reaches with far tiles
    before ``key_tile_ranges``'s ``far`` on ``grid`` ``(FAR_M, FAR_N)``, and one more for the far tiles' sum."""
    bm, bn = tile(cfg, "dq")[:2]
    gm, gn = grid
    top = max(start_m - (max((start_m // gm) * gm - far + 1, 0) // gn) * gn for start_m in range(0, length, bm))
    return (top + max(bm, bn)) // min(bm, bn) + 2
