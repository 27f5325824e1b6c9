"""Training throughput and peak memory: stock transformer_lm against the plugin's archs, side by side.

Every model is built through fairseq's parser, registry and language_modeling task, and one training
step is what fairseq-train does per update: ``task.train_step`` (forward, cross-entropy, backward) then
fairseq's Adam ``step`` and ``zero_grad``. Models take turns (round-robin) within every round, so
machine noise falls on all of them alike; ratios are medians of per-round ratios.

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` over one step. On CPU, where torch keeps no
such counter, the live tensor bytes at the step's start (parameters, optimizer state) plus the highest
"Total Allocated" that torch's profiler (``profile_memory=True``) records during one step: the peak of
live tensor memory, like the CUDA number, and free of the allocator caching that would blur RSS.

    python benchmarks/train_throughput.py                  # base sizes, lengths 128 512 1024 2048
    python benchmarks/train_throughput.py --smoke          # tiny, seconds: checks the script runs
"""

import json
import os
import statistics
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import (  # noqa: E402
    SMOKE_SIZES, STOCK_ARCH, apply_threads, base_size_archs, build, command_line, common_arguments, machine,
    make_sample, median_ratio, print_machine, synchronize, write_json,
)


def parse_args(argv=None):
    parser = common_arguments(__doc__.split("\n")[0], "benchmarks/results/train_throughput.json")
    parser.add_argument("--archs", nargs="*", default=None, help="default: transformer_lm and every base-size plugin arch")
    parser.add_argument("--lengths", nargs="*", type=int, default=[128, 512, 1024, 2048])
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per batch; batch size = tokens / length")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per model per round")
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--extra", nargs="*", default=[], help="extra fairseq flags for every model, e.g. --dropout 0")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory step")
    args = parser.parse_args(argv)
    if args.smoke:
        args.lengths, args.tokens, args.rounds, args.steps, args.vocab = [16, 32], 64, 1, 1, 50
        args.extra = SMOKE_SIZES + args.extra
    return args


def live_bytes(model, optimizer) -> int:
    tensors = [p for p in model.parameters()]
    for state in optimizer.optimizer.state.values():
        tensors += [t for t in state.values() if torch.is_tensor(t)]
    return sum(t.numel() * t.element_size() for t in tensors)


def peak_memory_bytes(step, model, optimizer) -> int:
    """Peak live tensor bytes during one ``step()`` (see the module doc for CPU vs CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        step()
        return torch.cuda.max_memory_allocated()
    from torch.profiler import ProfilerActivity, profile

    before = live_bytes(model, optimizer)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    with tempfile.NamedTemporaryFile(suffix=".json") as trace:
        prof.export_chrome_trace(trace.name)
        events = json.load(open(trace.name))["traceEvents"]
    during = [e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"]
    return before + max([0] + during)


def main(argv=None):
    args = parse_args(argv)
    apply_threads(args.threads)
    info = machine()
    print_machine(info)
    archs = args.archs or base_size_archs()
    print(f"archs: {' '.join(archs)}; lengths {args.lengths}; {args.tokens} tokens per batch; "
          f"{args.rounds} rounds x {args.steps} steps; vocab {args.vocab}; extra {args.extra}", flush=True)

    built = {arch: build(arch, max(args.lengths), args.vocab, args.extra) for arch in archs}
    device = next(built[archs[0]][0].parameters()).device
    samples = {n: make_sample(max(1, args.tokens // n), n, args.vocab, device) for n in args.lengths}
    updates = {arch: 0 for arch in archs}

    def step(arch, length):
        model, task, criterion, optimizer, _ = built[arch]
        task.train_step(samples[length], model, criterion, optimizer, updates[arch])
        optimizer.step()
        optimizer.zero_grad()
        updates[arch] += 1

    results = {n: {arch: {"tokens_per_s": []} for arch in archs} for n in args.lengths}
    skipped = {}
    for n in args.lengths:  # warm-up (and the out-of-memory check) once per model and length
        for arch in archs:
            try:
                step(arch, n)
            except (RuntimeError, MemoryError) as err:  # e.g. CUDA out of memory at 2048
                skipped.setdefault(n, {})[arch] = str(err).split("\n")[0]
    import time

    for r in range(args.rounds):
        for n in args.lengths:
            for arch in archs:
                if arch in skipped.get(n, {}):
                    continue
                tokens = samples[n]["ntokens"] * args.steps
                synchronize()
                start = time.perf_counter()
                for _ in range(args.steps):
                    step(arch, n)
                synchronize()
                results[n][arch]["tokens_per_s"].append(tokens / (time.perf_counter() - start))
            line = " ".join(f"{a}={results[n][a]['tokens_per_s'][-1]:.0f}" for a in archs if results[n][a]["tokens_per_s"])
            print(f"round {r + 1} length {n}: tokens/s {line}", flush=True)

    if not args.no_memory:
        for n in args.lengths:
            for arch in archs:
                if arch not in skipped.get(n, {}):
                    model, _, _, optimizer, _ = built[arch]
                    results[n][arch]["peak_memory_bytes"] = peak_memory_bytes(lambda: step(arch, n), model, optimizer)

    rows = []
    for n in args.lengths:
        stock = results[n].get(STOCK_ARCH, {}).get("tokens_per_s")
        rpe = results[n].get("transformer_lm_rpe", {})
        for arch in archs:
            res = results[n][arch]
            if not res["tokens_per_s"]:
                continue
            res["median_tokens_per_s"] = statistics.median(res["tokens_per_s"])
            if stock:
                res["throughput_vs_stock"] = median_ratio(res["tokens_per_s"], stock)
            if rpe.get("tokens_per_s"):
                res["throughput_vs_rpe"] = median_ratio(res["tokens_per_s"], rpe["tokens_per_s"])
            if "peak_memory_bytes" in res:
                if "peak_memory_bytes" in results[n].get(STOCK_ARCH, {}):
                    res["memory_vs_stock"] = res["peak_memory_bytes"] / results[n][STOCK_ARCH]["peak_memory_bytes"]
                if "peak_memory_bytes" in rpe:
                    res["memory_vs_rpe"] = res["peak_memory_bytes"] / rpe["peak_memory_bytes"]
            rows.append((n, arch, res))

    print("\n| length | arch | tokens/s | vs stock | vs RPE | peak MB | mem vs stock | mem vs RPE |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    fmt = lambda res, key, f: (f.format(res[key]) if key in res else "")  # noqa: E731
    for n, arch, res in rows:
        print(f"| {n} | {arch} | {res['median_tokens_per_s']:.0f} | {fmt(res, 'throughput_vs_stock', '{:.3f}')} | "
              f"{fmt(res, 'throughput_vs_rpe', '{:.3f}')} | "
              f"{fmt({'m': res['peak_memory_bytes'] / 2**20} if 'peak_memory_bytes' in res else {}, 'm', '{:.0f}')} | "
              f"{fmt(res, 'memory_vs_stock', '{:.3f}')} | {fmt(res, 'memory_vs_rpe', '{:.3f}')} |")
    for n, failures in skipped.items():
        for arch, why in failures.items():
            print(f"skipped {arch} at length {n}: {why}")

    write_json(args.json, {
        "benchmark": "train_throughput", "command": command_line(), "machine": info,
        "machine_after": machine()["load_average_1_5_15"],
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "params": {arch: sum(p.numel() for p in built[arch][0].parameters()) for arch in archs},
        "results": {str(n): results[n] for n in args.lengths}, "skipped": {str(n): s for n, s in skipped.items()},
    })
    return results


if __name__ == "__main__":
    main()
