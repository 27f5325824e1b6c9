"""Training throughput and peak memory: stock transformer_lm against the plugin's archs, side by side.

Every model is built through fairseq's parser, registry and language_modeling task, and one training
step is what fairseq-train does per update: ``task.train_step`` (forward, cross-entropy, backward) then
fairseq's Adam ``step`` and ``zero_grad``. Models take turns (round-robin) within every round, so
machine noise falls on all of them alike; ratios are medians of per-round ratios. Throughput is given
per wall second and per CPU second of the process (see ``benchmarks.common.clock``): on a shared
machine the second is the one to read.

Peak memory of one step (``benchmarks.common.peak_memory_bytes``): on CUDA
``torch.cuda.max_memory_allocated``; on CPU the parameters and optimizer state plus the peak of the
step's own live allocations as torch's profiler records them: live tensors in both cases.

    python -m benchmarks.train_throughput                  # base sizes, lengths 128 512 1024 2048
    python -m benchmarks.train_throughput --smoke          # tiny, seconds: checks the script runs
"""

import shlex
import statistics

import torch

from benchmarks.common import (
    SMOKE_SIZES, STOCK_ARCH, build, common_arguments, make_sample, median_ratio, peak_memory_bytes, save_results,
    start, stopwatch,
)


def parse_args(argv=None):
    parser = common_arguments(__doc__.split("\n")[0], "benchmarks/results/train_throughput.json")
    parser.add_argument("--archs", nargs="*", default=None, help="default: transformer_lm and every base-size plugin arch")
    parser.add_argument("--lengths", nargs="*", type=int, default=[128, 512, 1024, 2048])
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per batch; batch size = tokens / length")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per model per round")
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--extra", type=shlex.split, default=[],
                        help="extra fairseq flags for every model, one string: --extra '--urpe-attention-impl dense'")
    parser.add_argument("--impl", default="auto", choices=["auto", "dense", "fused"],
                        help="--urpe-attention-impl of the plugin's models (default: %(default)s)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory step")
    args = parser.parse_args(argv)
    if args.smoke:
        args.lengths, args.tokens, args.rounds, args.steps, args.vocab = [16], 32, 1, 1, 50
        args.extra = SMOKE_SIZES + args.extra
    return args


def live_bytes(model, optimizer) -> int:
    tensors = [p for p in model.parameters()]
    for state in optimizer.optimizer.state.values():
        tensors += [t for t in state.values() if torch.is_tensor(t)]
    return sum(t.numel() * t.element_size() for t in tensors)


def main(argv=None):
    args = parse_args(argv)
    info, archs = start(args)
    print(f"archs: {' '.join(archs)}; lengths {args.lengths}; {args.tokens} tokens per batch; "
          f"{args.rounds} rounds x {args.steps} steps; vocab {args.vocab}; extra {args.extra}", flush=True)

    def flags(arch):
        return args.extra + ([] if arch == STOCK_ARCH else ["--urpe-attention-impl", args.impl])

    built = {arch: build(arch, max(args.lengths), args.vocab, flags(arch)) for arch in archs}
    device = next(built[archs[0]][0].parameters()).device
    samples = {n: make_sample(max(1, args.tokens // n), n, args.vocab, device) for n in args.lengths}
    updates = {arch: 0 for arch in archs}

    def step(arch, length):
        model, task, criterion, optimizer, _ = built[arch]
        task.train_step(samples[length], model, criterion, optimizer, updates[arch])
        optimizer.step()
        optimizer.zero_grad()
        updates[arch] += 1

    results = {n: {arch: {"tokens_per_s": [], "tokens_per_cpu_s": []} for arch in archs} for n in args.lengths}
    skipped = {}
    for n in args.lengths:  # warm-up (and the out-of-memory check) once per model and length
        for arch in archs:
            try:
                step(arch, n)
            except (RuntimeError, MemoryError) as err:  # e.g. CUDA out of memory at 2048
                skipped.setdefault(n, {})[arch] = str(err).split("\n")[0]

    for r in range(args.rounds):
        for n in args.lengths:
            for arch in archs:
                if arch in skipped.get(n, {}):
                    continue
                tokens = samples[n]["ntokens"] * args.steps
                _, wall, cpu = stopwatch(lambda: [step(arch, n) for _ in range(args.steps)])
                results[n][arch]["tokens_per_s"].append(tokens / wall)
                results[n][arch]["tokens_per_cpu_s"].append(tokens / cpu)
            line = " ".join(f"{a}={results[n][a]['tokens_per_s'][-1]:.0f}/{results[n][a]['tokens_per_cpu_s'][-1]:.0f}"
                            for a in archs if results[n][a]["tokens_per_s"])
            print(f"round {r + 1} length {n}: tokens per wall/CPU second {line}", flush=True)

    if not args.no_memory:
        for n in args.lengths:
            for arch in archs:
                if arch not in skipped.get(n, {}):
                    model, _, _, optimizer, _ = built[arch]
                    before = live_bytes(model, optimizer) if not torch.cuda.is_available() else 0
                    results[n][arch]["peak_memory_bytes"] = peak_memory_bytes(lambda: step(arch, n), before)

    rows = []
    for n in args.lengths:
        stock, rpe = results[n].get(STOCK_ARCH, {}), results[n].get("transformer_lm_rpe", {})
        for arch in archs:
            res = results[n][arch]
            if not res["tokens_per_s"]:
                continue
            for key in ("tokens_per_s", "tokens_per_cpu_s"):
                res[f"median_{key}"] = statistics.median(res[key])
                for name, other in (("stock", stock), ("rpe", rpe)):
                    if other.get(key):
                        res[f"{key}_vs_{name}"] = median_ratio(res[key], other[key])
            for name, other in (("stock", stock), ("rpe", rpe)):
                if "peak_memory_bytes" in res and "peak_memory_bytes" in other:
                    res[f"memory_vs_{name}"] = res["peak_memory_bytes"] / other["peak_memory_bytes"]
            rows.append((n, arch, res))

    def cell(res, key, fmt="{:.3f}", scale=1.0):
        return fmt.format(res[key] / scale) if key in res else ""

    print("\n| length | arch | tokens/s (wall) | vs stock | vs RPE | tokens/CPU-s | vs stock | vs RPE "
          "| peak MiB | vs stock | vs RPE |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, arch, res in rows:
        print(f"| {n} | {arch} | {cell(res, 'median_tokens_per_s', '{:.0f}')} | {cell(res, 'tokens_per_s_vs_stock')} | "
              f"{cell(res, 'tokens_per_s_vs_rpe')} | {cell(res, 'median_tokens_per_cpu_s', '{:.0f}')} | "
              f"{cell(res, 'tokens_per_cpu_s_vs_stock')} | {cell(res, 'tokens_per_cpu_s_vs_rpe')} | "
              f"{cell(res, 'peak_memory_bytes', '{:.0f}', 2**20)} | {cell(res, 'memory_vs_stock')} | "
              f"{cell(res, 'memory_vs_rpe')} |")
    for n, failures in skipped.items():
        for arch, why in failures.items():
            print(f"skipped {arch} at length {n}: {why}")

    save_results(args, __file__, argv, info,
                 params={arch: sum(p.numel() for p in built[arch][0].parameters()) for arch in archs},
                 results={str(n): results[n] for n in args.lengths}, skipped={str(n): s for n, s in skipped.items()})
    return results


if __name__ == "__main__":
    main()
