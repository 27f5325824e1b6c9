"""``paths``: which attention path runs, decided by measurement; writes the dispatch table ``auto`` reads.

For each configuration (``POINTS`` x kinds x dropout, most used first, until the section's budget):

1. every candidate path (``fused``, ``flex``, ``dense``; flex only without dropout), and SDPA flash, is
   checked against the float64 reference at a small shape (``CHECK_LENGTH``, the point's dtype and head dim): the output and
   every gradient, ``max |path - ref| / max |ref|`` within ``self_check.TOLERANCE[dtype]``; with dropout,
   the path's dropout-free check stands for it (a random mask has no float64 twin);
2. the paths that passed are timed, forward+backward (``triton.testing.do_bench``), with their peak memory
   beyond the inputs, at the point's shape, beside SDPA flash (``is_causal``, the stock attention; with
   the same dropout);
3. the fastest path that passed is the configuration's entry in the dispatch table
   (:mod:`fairseq_urpe.kernels.dispatch_table`), written at ``$DISPATCH_TABLE`` (default: where ``auto``
   reads it).

Kinds: ``bias`` (a bias table over every distance), ``urpe`` (bias and C over every distance: flex's
shifted form), ``urpe_tail`` (T5-bucket tables, constant from ``MODEL_FAR``: flex's band form; the
default ``transformer_lm_urpe``), ``none`` (no position term: RoPE or NoPE). The ratios printed are each
path's time over SDPA flash's, measured in the same process.

:func:`choose_paths` does steps 1-3 with the check and the timer passed in, so the table's writing is
tested on CPU with a stub timer (tests/kernels/test_dispatch_table.py); no speed is asserted there.
"""

import os
from typing import Callable, Dict, Iterable, List, Optional

import torch

from .prediction import MODEL_FAR
from .record import GPU, Record, cases, run_case

# (length, head dim, dtype, batch, heads): the two points the speed targets name, 16k and 12k tokens a batch
POINTS = ((2048, 64, torch.bfloat16, 8, 16), (3072, 128, torch.float16, 4, 8))
KINDS = ("urpe_tail", "bias", "urpe", "none")
DROPOUT = 0.1
CHECK_LENGTH = 333  # odd, past two of the largest blocks
CANDIDATES = ("fused", "flex", "dense")


def make_tables(kind: str, heads: int, length: int, device, requires_grad=True):
    """``(bias_table, c_table)`` of ``kind`` (see the module doc), float32, values away from C's start."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    reach = {"bias": length, "urpe": length, "urpe_tail": min(length, MODEL_FAR + 1)}.get(kind)
    if reach is None:
        return None, None
    bias = (torch.randn(heads, reach, generator=gen) * 0.5).to(device).requires_grad_(requires_grad)
    if kind == "bias":
        return bias, None
    c = (torch.rand(heads, reach, generator=gen) * 1.5 - 0.25).to(device).requires_grad_(requires_grad)
    return bias, c


def dense_attention(q, k, v, bias=None, c=None, dropout_p=0.0):
    """The dense path's math (RelativeMultiheadAttention's): scores in float32, softmax, ⊙ C, dropout, @ V."""
    from fairseq_urpe.kernels.reference import causal_urpe_attention_reference

    if dropout_p == 0:
        return causal_urpe_attention_reference(q, k, v, bias, c, scale=1.0)
    length = q.size(2)
    keep = torch.rand(q.size(0), q.size(1), length, length, device=q.device) >= dropout_p
    return causal_urpe_attention_reference(q, k, v, bias, c, scale=1.0, dropout_mask=keep / (1 - dropout_p))


def path_function(path: str, engine=None) -> Callable:
    """``f(q, k, v, bias, c, dropout_p) -> out`` of ``path`` (q already scaled)."""
    if path == "dense":
        return dense_attention
    if path == "fused":
        from fairseq_urpe.kernels.fused_urpe_attention import fused_causal_urpe_attention

        return lambda q, k, v, b, c, p: fused_causal_urpe_attention(q, k, v, b, c, scale=1.0, dropout_p=p)
    if path == "flex":
        return lambda q, k, v, b, c, p: engine(q, k, v, b, c)
    raise ValueError(f"unknown path {path!r}")


def candidates(dropout: bool) -> List[str]:
    return [p for p in CANDIDATES if not (dropout and p == "flex")]  # flex_attention has no dropout


def check_path(fn: Callable, kind: str, dtype, head_dim: int, device, length: int = CHECK_LENGTH) -> Dict:
    """``fn`` (dropout-free) against the float64 reference, output and every gradient; ``{"ok", "worst",
    "accepted", "errors"}``."""
    from fairseq_urpe.kernels.reference import causal_urpe_attention_reference
    from fairseq_urpe.kernels.self_check import TOLERANCE, relative_error

    gen = torch.Generator(device="cpu").manual_seed(1)
    q, k, v = (torch.randn(2, 4, length, head_dim, generator=gen).to(device) for _ in range(3))
    q = q / head_dim ** 0.5
    bias, c = make_tables(kind, 4, length, device)
    grad = torch.randn(2, 4, length, head_dim, generator=gen).to(device)

    def outputs(f, work_dtype):
        """``[out, d(q, k, v, tables)]`` of ``f`` on the inputs in ``work_dtype`` (tables in at least float32)."""
        qkv = [x.detach().to(work_dtype).requires_grad_() for x in (q, k, v)]
        table_dtype = torch.promote_types(work_dtype, torch.float32)
        tables = [None if t is None else t.detach().to(table_dtype).requires_grad_() for t in (bias, c)]
        out = f(*qkv, *tables, 0.0)
        leaves = qkv + [t for t in tables if t is not None]
        grads = torch.autograd.grad(out, leaves, grad.to(out.dtype), allow_unused=True)
        return [out] + [torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)]

    reference = lambda q, k, v, b, c, p: causal_urpe_attention_reference(q, k, v, b, c, scale=1.0)  # noqa: E731
    results = [outputs(fn, dtype), outputs(reference, torch.float64)]
    names = ["output", "dq", "dk", "dv"] + [n for n, t in (("dbias", bias), ("dc", c)) if t is not None]
    errors = {n: relative_error(a.double(), b) for n, a, b in zip(names, *results)}
    accepted = TOLERANCE[dtype]
    return {"ok": all(e <= accepted for e in errors.values()), "worst": max(errors.values()), "accepted": accepted,
            "errors": errors}


def choose_paths(configs: Iterable[Dict], check: Callable[[str, Dict], Dict],
                 time_path: Callable[[str, Dict], Dict], device_name: str) -> List[Dict]:
    """Steps 1-3 of the module doc for each of ``configs`` (``{length, head_dim, dtype, batch, heads, kind,
    dropout}``): ``check(path, config)`` -> ``{"ok", ...}``, ``time_path(path, config)`` -> ``{"ms",
    "peak_mib"}`` (``path`` also ``"sdpa_flash"``). Returns per configuration the dispatch table's fields
    (:func:`~fairseq_urpe.kernels.dispatch_table.write_table`) with the measurements and ratios."""
    results, checked = [], {}
    for config in configs:
        paths = candidates(config["dropout"])
        for path in paths:
            key = (path, config["kind"], config["dtype"], config["head_dim"])
            if key not in checked:
                checked[key] = check(path, config)
        passed = [p for p in paths if checked[(p, config["kind"], config["dtype"], config["head_dim"])]["ok"]]
        timed = {p: time_path(p, config) for p in ["sdpa_flash"] + passed}
        flash = timed["sdpa_flash"].get("ms")
        results.append({
            "device": device_name, "dtype": str(config["dtype"]).replace("torch.", ""), "head_dim": config["head_dim"],
            "kind": config["kind"], "dropout": bool(config["dropout"]), "length": config["length"],
            "passed": passed, "failed": [p for p in paths if p not in passed],
            "ms": {p: timed[p].get("ms") for p in passed},
            "peak_mib": {p: timed[p].get("peak_mib") for p in timed},
            "sdpa_flash_ms": flash,
            "vs_sdpa_flash": {p: timed[p]["ms"] / flash for p in passed if flash and timed[p].get("ms")},
        })
    return results


def ratio_table(results: List[Dict]) -> str:
    """One line per configuration: each path's time over SDPA flash's (``-``: failed its check or not a candidate)."""
    lines = ["| L | d | dtype | kind | dropout | " + " | ".join(CANDIDATES) + " | chosen |",
             "|---:|---:|---|---|---|" + "---:|" * len(CANDIDATES) + "---|"]
    from fairseq_urpe.kernels.dispatch_table import fastest

    for r in results:
        ratios = [f"{r['vs_sdpa_flash'][p]:.2f}x" if p in r["vs_sdpa_flash"] else
                  ("FAILED" if p in r["failed"] else "-") for p in CANDIDATES]
        lines.append(f"| {r['length']} | {r['head_dim']} | {r['dtype']} | {r['kind']} | {'yes' if r['dropout'] else 'no'} | "
                     + " | ".join(ratios) + f" | {fastest(r['ms'], r['passed']) or 'none passed'} |")
    return "\n".join(lines)


def configurations() -> List[Dict]:
    """Most used first: the first point (L2048 d64 bf16) before the second, the default tables first."""
    return [dict(length=length, head_dim=d, dtype=dtype, batch=batch, heads=heads, kind=kind, dropout=dropout)
            for length, d, dtype, batch, heads in POINTS for dropout in (False, True) for kind in KINDS]


def paths(record: Record, args) -> None:
    if not GPU:
        record.skip("all", "needs CUDA: the dispatch table holds GPU measurements")
        return
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from fairseq_urpe.kernels.dispatch_table import device_name, table_path, write_table
    from fairseq_urpe.kernels.flex_attention import FlexEngine

    # This process compiles flex for every configuration: more shapes than dynamo's default limit.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = max(256, torch._dynamo.config.accumulated_recompile_limit)
    engine = FlexEngine(compiled=True, shape_limit=64)
    functions = {p: path_function(p, engine) for p in CANDIDATES}

    def check(path, config):
        result = {"ok": False}

        def run():
            nonlocal result
            result = check_path(functions[path], config["kind"], config["dtype"], config["head_dim"], "cuda")
            return dict(result)

        run_case(record, f"check {path}: {config['kind']}, {str(config['dtype'])[6:]}, head dim {config['head_dim']}", run)
        return result

    def time_path(path, config):
        measured = {}

        def run():
            length, d, batch, heads = config["length"], config["head_dim"], config["batch"], config["heads"]
            p = DROPOUT if config["dropout"] else 0.0
            q, k, v = (torch.randn(batch, heads, length, d, device="cuda", dtype=config["dtype"], requires_grad=True)
                       for _ in range(3))
            bias, c = make_tables(config["kind"], heads, length, "cuda")
            leaves = [x for x in (q, k, v, bias, c) if x is not None]
            grad = torch.randn_like(q)
            if path == "sdpa_flash":
                def fn():
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        return sdpa(q, k, v, is_causal=True, dropout_p=p, scale=1.0)
                leaves = [q, k, v]
            else:
                fn = lambda: functions[path](q, k, v, bias, c, p)  # noqa: E731
            ms = triton.testing.do_bench(lambda: torch.autograd.grad(fn(), leaves, grad), warmup=25, rep=100)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            torch.autograd.grad(fn(), leaves, grad)
            torch.cuda.synchronize()
            measured.update(ms=ms, peak_mib=(torch.cuda.max_memory_allocated() - base) / 2**20)
            return {"length": length, "forward_backward_ms": ms, "peak_extra_mib": measured["peak_mib"]}

        name = (f"time {path}: L={config['length']} d={config['head_dim']} {str(config['dtype'])[6:]} {config['kind']}"
                f"{' dropout' if config['dropout'] else ''}")
        run_case(record, name, run)
        torch.cuda.empty_cache()
        return measured

    def flash(q, k, v, b, c, p):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return sdpa(q, k, v, is_causal=True, scale=1.0)

    for length, d, dtype, _, _ in POINTS:  # the stock attention, the ratios' denominator, checked as the paths are
        run_case(record, f"check sdpa_flash: none, {str(dtype)[6:]}, head dim {d}",
                 lambda d=d, dtype=dtype: check_path(flash, "none", dtype, d, "cuda"))
    results = choose_paths(cases(record, configurations()), check, time_path, device_name(torch.device("cuda")))
    print(ratio_table(results), flush=True)
    destination = os.environ.get("DISPATCH_TABLE") or table_path()
    written = write_table(destination, results, "benchmarks/gpu_check.sh (paths)")
    record.add({"case": "dispatch table", "ok": True, "path": destination, "entries": written["entries"],
                "measured": results})
    print(f"[paths] dispatch table: {len(written['entries'])} configurations -> {destination}", flush=True)
