"""Every kernel touches only the memory of its own tensors: each tensor sits inside guard memory.

Every tensor the kernels read or write (q, k, v, the tables, the padding mask, dO, the output, row
statistics, dQ, dK, dV and the table gradients) is a view into a larger buffer whose words before and
after it hold a sentinel (``benchmarks/guard_memory.py``). Two checks, both under Triton's interpreter:

- every load, store and atomic that a kernel executes (mask on) is checked against the extents of the
  views passed to it, so an access that lands anywhere else (a guard, another tensor) fails at once,
  reads included;
- the guard words are bit for bit unchanged after forward and backward. The float sentinel is -0.0,
  which an atomic ``+ 0.0`` turns into +0.0 (the out-of-bounds adds of an all-masked diagonal).

Tiles are the GPU's (the shapes that run on hardware), lengths not multiples of them; with both tables,
attention dropout is on too.
"""

import itertools

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from triton.runtime import interpreter  # noqa: E402

from benchmarks.guard_memory import GuardedTensors  # noqa: E402
from fairseq_urpe.kernels import fused_urpe_attention as kernel  # noqa: E402
from fairseq_urpe.kernels import tiles  # noqa: E402

HEADS, HEAD_DIM = 1, 16  # one head: its first row starts the tensor and its last row ends it


@pytest.fixture
def access_check(monkeypatch):
    """Check every executed load/store/atomic of the interpreter against the allowed extents."""
    state = {"extents": [], "checked": 0, "outside": []}
    builder = interpreter.interpreter_builder

    def check(kind, ptrs, mask):
        addresses = np.asarray(ptrs.data, dtype=np.uint64).ravel()
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), ptrs.data.shape).ravel()
        addresses = addresses[active]
        if addresses.size == 0:
            return
        width = ptrs.get_element_ty().primitive_bitwidth // 8
        inside = np.zeros(addresses.shape, dtype=bool)
        for lo, hi, _ in state["extents"]:
            inside |= (addresses >= lo) & (addresses + width <= hi)
        state["checked"] += addresses.size
        if not inside.all():
            bad = addresses[~inside].astype(np.int64)
            lo, hi, name = min(state["extents"], key=lambda e: min(abs(int(bad[0]) - e[0]), abs(int(bad[0]) - e[1])))
            elements = (bad - lo) // width
            state["outside"].append(f"{kind} of {bad.size} elements outside every tensor: elements "
                                    f"{elements.min()}..{elements.max()} of {name} (size {(hi - lo) // width})")

    load, store, rmw = builder.create_masked_load, builder.create_masked_store, builder.create_atomic_rmw

    def checked_load(ptrs, mask, other, *args):
        check("load", ptrs, mask)
        return load(ptrs, mask, other, *args)

    def checked_store(ptrs, value, mask, *args):
        check("store", ptrs, mask)
        return store(ptrs, value, mask, *args)

    def checked_rmw(op, ptr, val, mask, *args):
        check("atomic", ptr, mask)
        return rmw(op, ptr, val, mask, *args)

    monkeypatch.setattr(builder, "create_masked_load", checked_load)
    monkeypatch.setattr(builder, "create_masked_store", checked_store)
    monkeypatch.setattr(builder, "create_atomic_rmw", checked_rmw)
    return state


def randn(shape, dtype):
    return torch.randn(shape, dtype=dtype)


def zeros(shape, dtype):
    return torch.zeros(shape, dtype=dtype)


TABLES = {"none": (False, False), "bias": (True, False), "toeplitz": (False, True), "both": (True, True)}
CASES = list(itertools.product((1, 17, 129, 333), TABLES))


@pytest.mark.parametrize("length,tables", CASES, ids=[f"T{t}-{n}" for t, n in CASES])
def test_kernels_stay_inside_their_tensors(length, tables, access_check):
    has_bias, has_c = TABLES[tables]
    dtype, batch = torch.float32, 1
    torch.manual_seed(length)
    g = GuardedTensors()
    shape = (batch, HEADS, length, HEAD_DIM)
    q, k, v, grad_out = (g.new(name, shape, dtype, randn) for name in ("q", "k", "v", "dO"))
    bias = g.new("bias", (HEADS, length), dtype, randn) if has_bias else None
    ctab = g.new("C", (HEADS, length), dtype, randn) if has_c else None
    pad = g.new("padding", (batch, length), torch.int8, zeros)
    pad[0, : min(2, length - 1)] = 1  # left padding (none at length 1: key 0 of query 0 stays visible)
    out = g.new("out", shape, dtype, zeros)
    row_max, row_sum, delta = (g.new(name, (batch * HEADS, length), dtype, zeros) for name in ("row max", "row sum", "delta"))
    dq, dk, dv = (g.new(name, shape, dtype, zeros) for name in ("dQ", "dK", "dV"))
    d_bias = g.new("bias gradient", (HEADS, length), dtype, zeros) if has_bias else None
    d_c = g.new("C gradient", (HEADS, length), dtype, zeros) if has_c else None
    cfg = tiles.gpu_blocks(HEAD_DIM, torch.bfloat16)  # bf16 training's tiles

    dropout = 0.1 if tables == "both" else 0.0  # the dropout variants read a seed
    seed = g.new("seed", (1,), torch.int64, lambda shape, dtype: torch.full(shape, 77, dtype=dtype)) if dropout else None
    access_check["extents"] = g.extents()

    kernel.launch_forward(q, k, v, bias, ctab, pad, out, row_max, row_sum, 0.25, cfg, dropout, seed)
    delta.copy_((grad_out * out).sum(-1).reshape(batch * HEADS, length))
    kernel.launch_backward(q, k, v, bias, ctab, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c,
                           0.25, cfg, dropout, seed)

    assert access_check["checked"] > 0
    errors = sorted(set(access_check["outside"])) + g.damaged()
    assert not errors, "\n".join(errors)
    assert torch.isfinite(out).all() and torch.isfinite(dq).all() and torch.isfinite(dk).all()


@pytest.mark.parametrize("length", [129, 333])
def test_the_far_share_and_its_table_gradients_stay_inside_their_tensors(length, access_check):
    """Without padding, with tables shorter than the sequence (far tiles): the forward's far share
    (``FarShare``), the delta kernel that adds the far tiles' table gradients, dQ without them, and (at 333:
    the far tiles of whole 128-key blocks) dK/dV adding those tiles' dQ to its float32 sum."""
    dtype, batch, n = torch.float32, 2, 20
    torch.manual_seed(length)
    g = GuardedTensors()
    shape = (batch, HEADS, length, HEAD_DIM)
    q, k, v, grad_out = (g.new(name, shape, dtype, randn) for name in ("q", "k", "v", "dO"))
    bias, ctab = (g.new(name, (HEADS, n), dtype, randn) for name in ("bias", "C"))
    out = g.new("out", shape, dtype, zeros)
    row_max, row_sum, delta = (g.new(name, (batch * HEADS, length), dtype, zeros) for name in ("row max", "row sum", "delta"))
    far = kernel.FarShare(g.new("far out", (batch * HEADS, length, HEAD_DIM), dtype, zeros),
                          *(g.new(name, (batch * HEADS, length), dtype, zeros) for name in ("far max", "far sum")))
    dq, dk, dv = (g.new(name, shape, dtype, zeros) for name in ("dQ", "dK", "dV"))
    d_bias, d_c = (g.new(name, (HEADS, n), dtype, zeros) for name in ("bias gradient", "C gradient"))
    far_dq_sum = g.new("far dQ sum", (batch * HEADS, length, HEAD_DIM), dtype, zeros)
    cfg = tiles.gpu_blocks(HEAD_DIM, torch.bfloat16)
    assert tiles.far_share_applies(cfg, length, bias, ctab) and tiles.far_dq_fits(cfg)
    access_check["extents"] = g.extents()

    kernel.launch_forward(q, k, v, bias, ctab, None, out, row_max, row_sum, 0.25, cfg, far=far)
    kernel.launch_delta(out, grad_out, delta, far, row_max, row_sum, bias, ctab, d_bias, d_c)
    kernel.launch_backward(q, k, v, bias, ctab, None, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c,
                           0.25, cfg, far=far, far_dq_sum=far_dq_sum)

    assert access_check["checked"] > 0
    errors = sorted(set(access_check["outside"])) + g.damaged()
    assert not errors, "\n".join(errors)
    assert far.row_sum.gt(0).any() and torch.isfinite(far.out).all() and torch.isfinite(d_c).all()
    grid = tiles.far_dq_grid(cfg)
    assert far_dq_sum.ne(0).any() == (tiles.far_tiles("dkdv", length, n - 1, *cfg["dkdv"][:2], grid) > 0)
