"""The GPU check of the fused attention, one section per process (benchmarks/gpu_check.sh runs them all).

Sections (each catches its own failures, stops starting new cases past its time budget, and rewrites the
JSON after every case, so a killed section keeps what it measured):

- ``environment``: versions, the GPU, TF32, compute-sanitizer, the kernel's tiles.
- ``correctness``: the fused kernel against the plain reference (output and every gradient) for fp16,
  bf16 and fp32 (TF32 on and off), head dims 64 and 128, padding, lengths that are no tile multiple,
  with and without attention dropout; and the attention module's fused path against its dense path.
- ``guard_memory``: every kernel with all its tensors inside guard memory (benchmarks/guard_memory.py),
  every table combination, both placements of the table gradients, lengths 1, 17, 129, 333.
- ``kernel_speed``: forward+backward time and peak memory at L = 512 .. 4096, head dim 64, bf16: the
  fused kernel (bias; bias and C; with dropout 0.1) against ``scaled_dot_product_attention`` with the
  flash backend (no bias) and with the memory-efficient backend and an additive bias (an RPE user's
  alternative), and the plain dense reference.
- ``end_to_end``: tokens/s and peak memory of training steps (fairseq's Trainer: fp16, the recipe's
  optimizer and criterion) for stock ``transformer_lm_wiki103`` and the RPE and URPE ``_wiki103`` archs
  with the dense and the fused attention, at the recipe's 3,072-token blocks.
- ``sanitizer``: ``guard_memory`` again under ``compute-sanitizer --tool memcheck`` where it is installed.

Without CUDA the sections that can run on CPU do, under Triton's interpreter (TRITON_INTERPRET=1) at
tiny sizes: that is what the test suite runs. ``--report`` writes the Markdown summary from the JSON.
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

SECTIONS = ("environment", "correctness", "guard_memory", "kernel_speed", "end_to_end", "sanitizer")
GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"


# ---------------------------------------------------------------- the JSON record, rewritten after each case

class Record:
    """One section's entry of the JSON file: status, seconds, results; written through at every change."""

    def __init__(self, path: str, section: str, budget_s: float):
        self.path, self.section, self.budget_s = path, section, budget_s
        self.start = time.time()
        self.entry = {"status": "running", "seconds": 0.0, "budget_s": budget_s, "results": [], "skipped": []}
        self.write()

    def out_of_time(self) -> bool:
        return time.time() - self.start > self.budget_s

    def add(self, result: dict) -> None:
        self.entry["results"].append(result)
        self.write()

    def skip(self, case: str, why: str) -> None:
        self.entry["skipped"].append(f"{case}: {why}")
        self.write()

    def finish(self, status: str, error: str = None) -> None:
        self.entry["status"] = status
        if error:
            self.entry["error"] = error
        self.write()

    def write(self) -> None:
        self.entry["seconds"] = round(time.time() - self.start, 1)
        data = load_json(self.path)
        data.setdefault("sections", {})[self.section] = self.entry
        data["mode"] = "gpu" if GPU else "cpu (Triton interpreter, tiny sizes)"
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, default=str)
        os.replace(tmp, self.path)


def load_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def cases(record: Record, items):
    """The items, until the section's time budget is spent; the rest are recorded as skipped."""
    items = list(items)
    for i, item in enumerate(items):
        if record.out_of_time():
            for rest in items[i:]:
                record.skip(str(rest), "section time budget spent")
            return
        yield item


def run_case(record: Record, name: str, fn) -> None:
    """``record.add(fn())`` with the case's name; an exception becomes a failed case, not a failed section."""
    start = time.time()
    try:
        result = fn()
        result = {"case": name, "ok": result.pop("ok", True), **result}
    except Exception as error:  # one case: compile error, out of memory, ...
        result = {"case": name, "ok": False, "error": f"{type(error).__name__}: {' '.join(str(error).split())[:400]}"}
        if GPU:
            torch.cuda.empty_cache()
    result["seconds"] = round(time.time() - start, 2)
    print(f"[{record.section}] {name}: {'ok' if result['ok'] else 'FAILED'} {short(result)}", flush=True)
    record.add(result)


def short(result: dict) -> str:
    return " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items()
                    if k not in ("case", "ok") and not isinstance(v, (dict, list)))[:300]


# ---------------------------------------------------------------- sections

def environment(record: Record, args) -> None:
    import triton

    from fairseq_urpe.kernels import fused_urpe_attention as kernel

    info = {
        "torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0],
        "cuda_runtime": torch.version.cuda, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
        "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR"),
        "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "compute_sanitizer": sanitizer_path(),
        "tiles": {f"{dtype} d{d}": kernel.gpu_blocks(d, getattr(torch, dtype))
                  for dtype in ("bfloat16", "float32") for d in (64, 128)},
    }
    try:
        import fairseq
        info["fairseq"] = fairseq.__version__
    except ImportError as error:
        info["fairseq"] = f"not importable: {error}"
    if GPU:
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}", memory_gib=round(props.total_memory / 2**30, 1),
                    multiprocessors=props.multi_processor_count, gpus_visible=torch.cuda.device_count())
        try:
            info["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                                                 "--format=csv,noheader"], capture_output=True, text=True,
                                                timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as error:
            info["nvidia_smi"] = str(error)
    record.add({"case": "environment", "ok": True, **info})


def correctness(record: Record, args) -> None:
    from fairseq_urpe.kernels.self_check import KernelConfig, kernel_errors, tolerance

    if GPU:
        # Most used first (the _wiki103 archs: head dim 128 with dropout; GPT-2 small: 64), in case the
        # time budget (compiles take most of it) runs out.
        both = (True, True)
        configs = [(dtype, d, dropout, both) for dtype in (torch.bfloat16, torch.float16)
                   for d, dropout in ((128, True), (64, False), (64, True), (128, False))]
        configs += [(torch.bfloat16, 64, False, (False, False)), (torch.bfloat16, 64, False, (True, False)),
                    (torch.bfloat16, 128, True, (False, True))]
        configs += [(torch.float32, 64, False, both, tf32) for tf32 in (True, False)]
        lengths = (1, 333, 1030)
    else:
        configs = [(torch.float32, 16, True, (True, True)), (torch.float64, 24, False, (False, False))]
        lengths = (1, 45)
    allowed = torch.backends.cuda.matmul.allow_tf32
    for config in cases(record, configs):
        dtype, d, dropout, tables = config[:4]
        tf32 = config[4] if len(config) > 4 else allowed
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            kc = KernelConfig(DEVICE, dtype, d, tables[0], tables[1], True, dropout)
            for length in lengths:
                name = kc.describe() + f", T={length}" + (f", TF32 {'on' if tf32 else 'off'}" if dtype == torch.float32 else "")

                def check(kc=kc, length=length):
                    errors = kernel_errors(kc, length)
                    accepted = tolerance(kc)
                    return {"ok": all(e <= accepted for e in errors.values()), "accepted": accepted,
                            "worst": max(errors.values()), "errors": errors}

                run_case(record, "kernel vs reference: " + name, check)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allowed
    module_configs = [(torch.bfloat16, 512, 8), (torch.bfloat16, 1024, 8), (torch.float16, 512, 8)] if GPU \
        else [(torch.float64, 32, 2)]
    for dtype, embed, heads in cases(record, module_configs):
        run_case(record, f"attention module fused vs dense: {dtype}, head dim {embed // heads}",
                 lambda: module_fused_vs_dense(dtype, embed, heads, 333 if GPU else 29))


def module_fused_vs_dense(dtype, embed, heads, length):
    """URPE attention (T5 bias, unique Toeplitz) with padding: the fused path against the dense one."""
    from fairseq_urpe.kernels.self_check import TOLERANCE, relative_error
    from fairseq_urpe.modules import RelativeMultiheadAttention, T5RelativeBias, ToeplitzReweighting

    torch.manual_seed(0)
    mods = []
    for impl in ("fused", "dense"):
        torch.manual_seed(0)
        attn = RelativeMultiheadAttention(embed, heads, T5RelativeBias(heads, 32, 128),
                                          ToeplitzReweighting(heads, "unique", max_distance=256), attention_impl=impl)
        for p in (attn.position_bias.weight, attn.toeplitz.weight):
            torch.nn.init.uniform_(p, 0.2, 1.5)
        mods.append(attn.to(DEVICE, dtype))
    x = torch.randn(length, 2, embed, device=DEVICE, dtype=dtype, requires_grad=True)
    pad = torch.zeros(2, length, dtype=torch.bool, device=DEVICE)
    pad[0, -5:] = True
    pad[1, :3] = True
    mask = torch.triu(torch.full((length, length), float("-inf"), device=DEVICE), 1)
    upstream = torch.randn_like(x)
    outs = []
    for attn in mods:
        out = attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)[0]
        outs.append([out] + list(torch.autograd.grad(out, [x] + list(attn.parameters()), upstream)))
    names = ["output", "gradient of x"] + [f"gradient of {n}" for n, _ in mods[0].named_parameters()]
    errors = {n: relative_error(a, b) for n, a, b in zip(names, *outs)}
    accepted = TOLERANCE[dtype]
    return {"ok": all(e <= accepted for e in errors.values()), "accepted": accepted, "worst": max(errors.values()),
            "errors": errors}


def guard_memory(record: Record, args) -> None:
    from benchmarks.guard_memory import GuardedTensors
    from fairseq_urpe.kernels import fused_urpe_attention as kernel

    tables = {"none": (False, False), "bias": (True, False), "toeplitz": (False, True), "both+dropout": (True, True)}
    if GPU:
        lengths = (129, 333) if args.quick else (1, 17, 129, 333)
        dims = (64,) if args.quick else (64, 128)
        dtype = torch.bfloat16
    else:
        lengths, dims, dtype = (45,), (16,), torch.float32
        tables = {k: v for k, v in tables.items() if k in ("none", "both+dropout")}
    combos = [(d, t, n, p) for d in dims for n in lengths for t in tables for p in ("dq", "dkdv")
              if (t != "none" or p == "dq") and (d == dims[0] or t == "both+dropout")]  # wider heads: one variant

    def one(d, tname, length, placement):
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
        cfg = {**kernel._blocks(torch.device(DEVICE), d, dtype, None), "table_grads": placement}
        kernel.launch_forward(q, k, v, bias, ctab, pad, out, row_max, row_sum, d ** -0.5, cfg, dropout, seed)
        delta.copy_((grad_out.float() * out.float()).sum(-1).reshape(batch * heads, length))
        kernel.launch_backward(q, k, v, bias, ctab, pad, grad_out, row_max, row_sum, delta, dq, dk, dv, d_bias, d_c,
                               d ** -0.5, cfg, dropout, seed)
        if GPU:
            torch.cuda.synchronize()
        damaged = g.damaged()
        finite = all(bool(torch.isfinite(x).all()) for x in (out, dq, dk, dv))
        return {"ok": not damaged and finite, "damaged": damaged, "finite": finite}

    for d, t, n, p in cases(record, combos):
        run_case(record, f"head dim {d}, {t}, T={n}, table gradients in {p}", lambda: one(d, t, n, p))


def kernel_speed(record: Record, args) -> None:
    if not GPU:
        record.skip("all", "needs CUDA: kernel timings are GPU measurements")
        return
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from fairseq_urpe.kernels.fused_urpe_attention import fused_causal_urpe_attention
    from fairseq_urpe.kernels.reference import causal_urpe_attention_reference

    heads, d, tokens, dtype = 16, 64, 16384, torch.bfloat16
    for length in cases(record, (512, 1024, 2048, 4096)):
        batch = max(1, tokens // length)
        q, k, v = (torch.randn(batch, heads, length, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        b = (torch.randn(heads, length, device="cuda") * 0.5).requires_grad_()
        c = (torch.rand(heads, length, device="cuda") + 0.5).requires_grad_()
        grad = torch.randn_like(q)
        idx = torch.arange(length, device="cuda")
        dist = (idx[:, None] - idx[None, :])
        future = dist < 0

        def bias_mask():  # (1, H, T, T): the RPE bias by distance, -inf above the diagonal; differentiable in b
            return b[:, dist.clamp(min=0)].masked_fill(future, float("-inf")).to(dtype)[None]

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return sdpa(q, k, v, is_causal=True)

        def efficient_bias():
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                return sdpa(q, k, v, attn_mask=bias_mask())

        fns = {
            "sdpa_flash_no_bias": (flash, (q, k, v)),
            "sdpa_efficient_with_bias": (efficient_bias, (q, k, v, b)),
            "fused_rpe_bias": (lambda: fused_causal_urpe_attention(q, k, v, b), (q, k, v, b)),
            "fused_urpe_bias_and_c": (lambda: fused_causal_urpe_attention(q, k, v, b, c), (q, k, v, b, c)),
            "fused_urpe_dropout_0.1": (lambda: fused_causal_urpe_attention(q, k, v, b, c, dropout_p=0.1), (q, k, v, b, c)),
            "dense_reference_urpe": (lambda: causal_urpe_attention_reference(q, k, v, b, c), (q, k, v, b, c)),
        }
        for name, (fn, leaves) in fns.items():
            if record.out_of_time():
                record.skip(f"L={length} {name}", "section time budget spent")
                continue

            def measure(fn=fn, leaves=leaves):
                both = triton.testing.do_bench(lambda: torch.autograd.grad(fn(), leaves, grad), warmup=25, rep=100)
                forward = triton.testing.do_bench(fn, warmup=10, rep=50)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                torch.autograd.grad(fn(), leaves, grad)
                torch.cuda.synchronize()
                return {"length": length, "batch": batch, "forward_ms": forward, "forward_backward_ms": both,
                        "peak_extra_mib": (torch.cuda.max_memory_allocated() - base) / 2**20}

            run_case(record, f"L={length} {name}", measure)
        del q, k, v, b, c, grad
        torch.cuda.empty_cache()


def end_to_end(record: Record, args) -> None:
    from benchmarks.common import SMOKE_SIZES, build, make_sample

    if GPU:
        length, vocab, warmup, steps = 3072, 267744, 3, 20
        extra = ["--fp16", "--optimizer", "nag", "--lr", "1.0", "--clip-norm", "0.1", "--criterion", "adaptive_loss",
                 "--max-tokens", str(length), "--ddp-backend", "legacy_ddp"]
        runs = [("transformer_lm_wiki103", None), ("transformer_lm_rpe_wiki103", "dense"),
                ("transformer_lm_rpe_wiki103", "auto"), ("transformer_lm_urpe_wiki103", "dense"),
                ("transformer_lm_urpe_wiki103", "auto")]
    else:
        length, vocab, warmup, steps = 24, 100, 1, 2
        extra = ["--optimizer", "nag", "--lr", "1.0", "--clip-norm", "0.1", "--criterion", "adaptive_loss",
                 "--adaptive-input-cutoff", "20,40", "--adaptive-softmax-cutoff", "20,40", "--max-tokens", str(length),
                 *SMOKE_SIZES, "--attention-dropout", "0.1", "--ddp-backend", "legacy_ddp"]
        runs = [("transformer_lm_wiki103", None), ("transformer_lm_urpe_wiki103", "fused")]

    def train(arch, impl):
        from fairseq.trainer import Trainer

        import fairseq_urpe.modules.relative_multihead_attention as attention_module

        calls = []
        real = attention_module.fused_relative_attention
        attention_module.fused_relative_attention = lambda *a, **k: calls.append(1) or real(*a, **k)
        try:
            flags = extra + (["--urpe-attention-impl", impl] if impl else [])
            model, task, criterion, _, cfg = build(arch, length, vocab, flags, optimizer=False)
            trainer = Trainer(cfg, task, model, criterion)
            sample = make_sample(1, length, vocab, "cpu")
            for _ in range(warmup):
                trainer.train_step([sample])
            if GPU:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                trainer.train_step([sample])
                if GPU:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            per_update = statistics.median(times)
            result = {"arch": arch, "impl": impl or "stock", "tokens_per_update": length,
                      "median_update_ms": per_update * 1e3, "tokens_per_s": length / per_update,
                      "fused_calls": len(calls), "params": sum(p.numel() for p in model.parameters()),
                      "loss": float(trainer.get_meter("train_loss").avg) if trainer.get_meter("train_loss") else None}
            if GPU:
                result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
            # auto must have taken the fused path where the kernel passed its self-check
            result["ok"] = impl not in ("fused", "auto") or len(calls) > 0
            del trainer, model
            return result
        finally:
            attention_module.fused_relative_attention = real
            if GPU:
                torch.cuda.empty_cache()

    for arch, impl in cases(record, runs):
        run_case(record, f"{arch} {impl or 'stock'}", lambda: train(arch, impl))
    by = {(r.get("arch"), r.get("impl")): r for r in record.entry["results"] if "median_update_ms" in r}
    stock = by.get(("transformer_lm_wiki103", "stock"))
    if stock:
        for r in record.entry["results"]:
            if "median_update_ms" in r:
                r["time_per_update_vs_stock"] = r["median_update_ms"] / stock["median_update_ms"]
        record.write()


def sanitizer_path():
    for path in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
                 "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if path and os.path.exists(path):
            return path
    return None


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
                   os.path.abspath(__file__), "--section", "guard_memory", "--quick", "--json", inner,
                   "--budget-s", str(max(10, record.budget_s - 30))]
        done = subprocess.run(command, capture_output=True, text=True, timeout=max(20, record.budget_s - 10))
        lines = (done.stdout + done.stderr).strip().splitlines()
        summary = [line for line in lines if "ERROR SUMMARY" in line or "Invalid" in line][:10]
        inner_ok = load_json(inner).get("sections", {}).get("guard_memory", {})
        cases_ok = all(r.get("ok") for r in inner_ok.get("results", [])) and bool(inner_ok.get("results"))
        return {"ok": done.returncode == 0 and cases_ok, "exit_code": done.returncode, "summary": summary,
                "cases": len(inner_ok.get("results", [])), "tail": lines[-5:]}

    run_case(record, "compute-sanitizer memcheck of guard_memory (quick)", memcheck)
    with contextlib.suppress(OSError):
        os.unlink(inner)


# ---------------------------------------------------------------- report

def report(json_path: str, md_path: str, exit_codes: dict) -> None:
    data = load_json(json_path)
    sections = data.setdefault("sections", {})
    for name, code in exit_codes.items():
        entry = sections.setdefault(name, {"status": "not started", "results": [], "skipped": []})
        if code != 0 and entry.get("status") in ("running", "ok", "not started"):
            entry["status"] = "killed (time limit)" if code in (124, 137) else f"process failed (exit {code})"
            entry["exit_code"] = code
    data["targets"] = targets(sections)
    with open(json_path, "w") as f:
        json.dump(data, f, indent=1, default=str)
    lines = [f"# GPU check of the fused attention ({data.get('mode', '?')})", "",
             "Written by `bash benchmarks/gpu_check.sh`; the numbers are in the JSON beside this file.", "",
             "| section | status | seconds | cases ok | failed | skipped |", "|---|---|---:|---:|---:|---:|"]
    for name in SECTIONS:
        e = sections.get(name)
        if e is None:
            continue
        res = e.get("results", [])
        lines.append(f"| {name} | {e.get('status')} | {e.get('seconds', '')} | {sum(bool(r.get('ok')) for r in res)} | "
                     f"{sum(not r.get('ok') for r in res)} | {len(e.get('skipped', []))} |")
    lines += ["", "## Targets", ""] + [f"- {t}" for t in data["targets"]] + [""]
    env = next(iter(sections.get("environment", {}).get("results", [])), {})
    if env:
        keys = ("gpu", "capability", "memory_gib", "nvidia_smi", "torch", "triton", "fairseq", "cuda_runtime",
                "allow_tf32_matmul", "compute_sanitizer")
        lines += ["## Environment", ""] + [f"- {k}: {env[k]}" for k in keys if k in env] + [""]
    for name, title in (("correctness", "Correctness (max |x - ref| / max |ref| over output and gradients)"),
                        ("guard_memory", "Guard memory"), ("sanitizer", "compute-sanitizer")):
        res = sections.get(name, {}).get("results", [])
        if res:
            lines += [f"## {title}", "", "| case | ok | worst | accepted | note |", "|---|---|---:|---:|---|"]
            for r in res:
                note = r.get("error") or "; ".join(r.get("damaged", []) or r.get("summary", []) or [])
                worst = f"{r['worst']:.2e}" if isinstance(r.get("worst"), float) else ""
                lines.append(f"| {r['case']} | {'yes' if r.get('ok') else '**no**'} | {worst} | {r.get('accepted', '')} | {note[:200]} |")
            lines.append("")
    res = sections.get("kernel_speed", {}).get("results", [])
    if res:
        lines += ["## Kernel: forward+backward, head dim 64, bf16, 16 heads, 16,384 tokens per batch", "",
                  "| case | fwd ms | fwd+bwd ms | vs flash | peak extra MiB |", "|---|---:|---:|---:|---:|"]
        flash = {r.get("length"): r.get("forward_backward_ms") for r in res if "sdpa_flash" in r["case"] and r.get("ok")}
        for r in res:
            if not r.get("ok"):
                lines.append(f"| {r['case']} | failed: {r.get('error', '')[:120]} | | | |")
                continue
            ratio = r["forward_backward_ms"] / flash[r["length"]] if flash.get(r["length"]) else float("nan")
            lines.append(f"| {r['case']} | {r['forward_ms']:.3f} | {r['forward_backward_ms']:.3f} | {ratio:.2f} | "
                         f"{r['peak_extra_mib']:.0f} |")
        lines.append("")
    res = sections.get("end_to_end", {}).get("results", [])
    if res:
        lines += ["## Training steps (fairseq Trainer)", "", "| arch | attention | ms/update | tokens/s | vs stock time | "
                  "peak GiB | fused calls |", "|---|---|---:|---:|---:|---:|---:|"]
        for r in res:
            if "median_update_ms" not in r:
                lines.append(f"| {r['case']} | failed: {r.get('error', '')[:120]} | | | | | |")
                continue
            lines.append(f"| {r['arch']} | {r['impl']} | {r['median_update_ms']:.1f} | {r['tokens_per_s']:.0f} | "
                         f"{r.get('time_per_update_vs_stock', float('nan')):.2f} | {r.get('peak_memory_gib', float('nan')):.2f} | "
                         f"{r['fused_calls']} |")
        lines.append("")
    for name in SECTIONS:
        e = sections.get(name, {})
        extra = [f"- {s}" for s in e.get("skipped", [])] + ([f"- error: {e['error']}"] if e.get("error") else [])
        if extra:
            lines += [f"## {name}: skipped or failed", ""] + extra + [""]
    with open(md_path, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {json_path} and {md_path}", flush=True)


def targets(sections: dict):
    """The issue's targets, where measured."""
    out = []
    speed = {r["case"]: r for r in sections.get("kernel_speed", {}).get("results", []) if r.get("ok")}
    flash, urpe, eff = (speed.get(f"L=2048 {n}") for n in ("sdpa_flash_no_bias", "fused_urpe_bias_and_c",
                                                             "sdpa_efficient_with_bias"))
    if flash and urpe:
        ratio = urpe["forward_backward_ms"] / flash["forward_backward_ms"]
        out.append(f"fused URPE fwd+bwd at L=2048, d=64, bf16 within 1.3x of SDPA flash (no bias): {ratio:.2f}x "
                   f"({'met' if ratio <= 1.3 else 'NOT met'})")
    else:
        out.append("fused vs SDPA flash at L=2048: not measured")
    if eff and urpe:
        ratio = urpe["forward_backward_ms"] / eff["forward_backward_ms"]
        out.append(f"fused URPE faster than SDPA memory-efficient with a bias at L=2048: {ratio:.2f}x its time "
                   f"({'met' if ratio < 1 else 'NOT met'})")
    else:
        out.append("fused vs SDPA memory-efficient with a bias at L=2048: not measured")
    mem = [speed.get(f"L={n} fused_urpe_bias_and_c", {}).get("peak_extra_mib") for n in (512, 1024, 2048, 4096)]
    if all(m is not None for m in mem):
        out.append("fused peak extra memory at L=512..4096 (same tokens per batch, so O(T) means flat): "
                   + ", ".join(f"{m:.0f}" for m in mem) + " MiB")
    else:
        out.append("fused peak attention memory at L=512..4096 (O(T)): not measured")
    e2e = {(r.get("arch"), r.get("impl")): r for r in sections.get("end_to_end", {}).get("results", [])
           if "median_update_ms" in r}
    fused = e2e.get(("transformer_lm_urpe_wiki103", "auto"))
    if fused and "time_per_update_vs_stock" in fused and _measured_on_gpu(sections):
        ratio = fused["time_per_update_vs_stock"]
        out.append(f"transformer_lm_urpe_wiki103 (auto: fused {'used' if fused['fused_calls'] else 'NOT used'}) time per "
                   f"update within 1.2x stock: {ratio:.2f}x ({'met' if ratio <= 1.2 else 'NOT met'})")
    else:
        out.append("_wiki103 URPE vs stock time per update: not measured on a GPU")
    return out


def _measured_on_gpu(sections):
    return bool(next(iter(sections.get("environment", {}).get("results", [])), {}).get("gpu"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--section", help=f"a section, or several separated by commas, run in this one process: "
                                          f"{', '.join(SECTIONS)}")
    parser.add_argument("--json", default="benchmarks/results/gpu_check.json")
    parser.add_argument("--budget-s", type=float, default=120.0, help="stop starting new cases after this many seconds")
    parser.add_argument("--quick", action="store_true", help="guard_memory: fewer cases (for compute-sanitizer)")
    parser.add_argument("--report", metavar="MD", help="write the Markdown summary of --json to MD")
    parser.add_argument("--exit-codes", default="", help="section=code,... of the section processes (for --report)")
    args = parser.parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    if args.report:
        codes = {k: int(v) for k, v in (item.split("=") for item in args.exit_codes.split(",") if item)}
        report(args.json, args.report, codes)
        return
    sections = args.section.split(",") if args.section else []
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        parser.error(f"--section must name sections among {', '.join(SECTIONS)}; got {args.section!r}")
    deadline, status = time.time() + args.budget_s, 0
    for section in sections:  # one budget for all: each section gets what the ones before left
        args.budget_s = max(0.0, deadline - time.time())
        status |= run_section(section, args)
    sys.exit(status)


def run_section(section: str, args) -> int:
    record = Record(args.json, section, args.budget_s)
    try:
        globals()[section](record, args)
    except Exception:
        record.finish("failed", traceback.format_exc()[-2000:])
        print(traceback.format_exc(), file=sys.stderr)
        return 1
    failed = [r for r in record.entry["results"] if not r.get("ok")]
    if failed:
        record.finish(f"{len(failed)} case(s) failed")
    elif any("budget" in s for s in record.entry["skipped"]):
        record.finish("partial (time budget)")
    else:
        record.finish("ok" if record.entry["results"] else "skipped")
    return 0


if __name__ == "__main__":
    main()
