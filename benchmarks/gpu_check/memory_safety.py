"""``guard_memory``: every kernel with its tensors inside guard memory; ``sanitizer``: that again under
compute-sanitizer's memcheck."""

import contextlib
import os
import subprocess
import sys

import torch

from .environment import sanitizer_path
from .record import DEVICE, GPU, Record, cases, load_json, run_case

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def guard_memory(record: Record, args) -> None:
    from benchmarks.guard_memory import GuardedTensors
    from fairseq_urpe.kernels import fused_urpe_attention as kernel
    from fairseq_urpe.kernels import tiles

    tables = {"none": (False, False), "bias": (True, False), "toeplitz": (False, True), "both+dropout": (True, True)}
    if GPU:
        lengths = (129, 333) if args.quick else (1, 17, 129, 333)
        dims = (64,) if args.quick else (64, 128)
        dtype = torch.bfloat16
    else:
        lengths, dims, dtype = (45,), (16,), torch.float32
        tables = {k: v for k, v in tables.items() if k in ("none", "both+dropout")}
    combos = [(d, t, n) for d in dims for n in lengths for t in tables
              if d == dims[0] or t == "both+dropout"]  # wider heads: one variant

    def one(d, tname, length):
        has_bias, has_c = tables[tname]
        heads, batch = 2, 2
        g = GuardedTensors(DEVICE)
        shape = (batch, heads, length, d)
        randn = lambda s, t: torch.randn(s, dtype=torch.float32).to(t)  # noqa: E731
        zeros = lambda s, t: torch.zeros(s, dtype=t)  # noqa: E731
        q, k, v, grad_out = (g.new(n, shape, dtype, randn) for n in ("q", "k", "v", "dO"))
        bias = g.new("bias", (heads, length), torch.float32, randn) if has_bias else None
        ctab = g.new("C", (heads, length), torch.float32, randn) if has_c else None
        pad = g.new("padding", (batch, length), torch.int8, zeros)
        pad[1, : min(2, length - 1)] = 1
        out = g.new("out", shape, dtype, zeros)
        row_max, row_sum, delta = (g.new(n, (batch * heads, length), torch.float32, zeros)
                                   for n in ("row max", "row sum", "delta"))
        dq, dk, dv = (g.new(n, shape, dtype, zeros) for n in ("dQ", "dK", "dV"))
        d_bias = g.new("bias gradient", (heads, length), torch.float32, zeros) if has_bias else None
        d_c = g.new("C gradient", (heads, length), torch.float32, zeros) if has_c else None
        dropout = 0.1 if "dropout" in tname else 0.0
        seed = g.new("seed", (1,), torch.int64, lambda s, t: torch.full(s, 7, dtype=t)) if dropout else None
        cfg = tiles.blocks_for(torch.device(DEVICE), d, dtype, None)
        kernel.launch_forward(q, k, v, bias, ctab, pad, out, row_max, row_sum, d ** -0.5, cfg, dropout, seed)
        delta.copy_((grad_out.float() * out.float()).sum(-1).reshape(batch * heads, length))
        kernel.launch_backward(q, k, v, bias, ctab, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c,
                               d ** -0.5, cfg, dropout, seed)
        if GPU:
            torch.cuda.synchronize()
        damaged = g.damaged()
        finite = all(bool(torch.isfinite(x).all()) for x in (out, dq, dk, dv))
        return {"ok": not damaged and finite, "damaged": damaged, "finite": finite}

    for d, t, n in cases(record, combos):
        run_case(record, f"head dim {d}, {t}, T={n}", lambda: one(d, t, n))


def sanitizer(record: Record, args) -> None:
    tool = sanitizer_path()
    if not GPU:
        record.skip("memcheck", "needs CUDA")
        return
    if tool is None:
        record.skip("memcheck", "compute-sanitizer is not installed (CUDA toolkit)")
        return
    inner = os.path.join(os.path.dirname(args.json) or ".", "gpu_check_sanitizer_inner.json")

    def memcheck():
        command = [tool, "--tool", "memcheck", "--error-exitcode", "99", "--print-limit", "20", sys.executable,
                   "-m", "benchmarks.gpu_check", "--section", "guard_memory", "--quick", "--json", os.path.abspath(inner),
                   "--budget-s", str(max(10, record.budget_s - 30))]
        done = subprocess.run(command, capture_output=True, text=True, timeout=max(20, record.budget_s - 10), cwd=REPO)
        lines = (done.stdout + done.stderr).strip().splitlines()
        summary = [line for line in lines if "ERROR SUMMARY" in line or "Invalid" in line][:10]
        inner_ok = load_json(inner).get("sections", {}).get("guard_memory", {})
        cases_ok = all(r.get("ok") for r in inner_ok.get("results", [])) and bool(inner_ok.get("results"))
        return {"ok": done.returncode == 0 and cases_ok, "exit_code": done.returncode, "summary": summary,
                "cases": len(inner_ok.get("results", [])), "tail": lines[-5:]}

    run_case(record, "compute-sanitizer memcheck of guard_memory (quick)", memcheck)
    with contextlib.suppress(OSError):
        os.unlink(inner)
