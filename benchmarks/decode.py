"""Incremental decoding: tokens/s generating after a prompt, and the cost of one token against the prefix length.

Each model (built through fairseq, as in train_throughput.py) decodes the way fairseq's
SequenceGenerator drives it: one token per call of ``model.decoder(tokens, incremental_state=state)``,
keys and values cached. The prompt is fed token by token too (as generation with a prefix does), then
``--generate`` tokens are chosen greedily. Every step is timed, so the per-token cost can be read
against the prefix length: with a key/value cache it should grow linearly (attention over the prefix),
not quadratically. Models take turns within every round: each decodes whole in turn (``--interleave
round``), or all decode at once, one step each in turn (``--interleave step``: the models' same steps are
timed milliseconds apart, so a slow spell of the machine falls on all of them).

    python -m benchmarks.decode                      # 512-token prompt, 256 generated, base sizes
    python -m benchmarks.decode --smoke
"""

import math
import shlex
import statistics

import torch

from benchmarks.common import (
    SMOKE_SIZES, STOCK_ARCH, build, common_arguments, median_ratio, save_results, start, stopwatch,
)


def parse_args(argv=None):
    parser = common_arguments(__doc__.split("\n")[0], "benchmarks/results/decode.json")
    parser.add_argument("--archs", nargs="*", default=None)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--generate", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--window", type=int, default=32, help="steps averaged around each reported prefix length")
    parser.add_argument("--interleave", choices=["round", "step"], default="round",
                        help="models take turns once per round (a whole decoding each) or at every step")
    parser.add_argument("--extra", type=shlex.split, default=[],
                        help="extra fairseq flags for every model, one string: --extra '--urpe-attention-impl dense'")
    args = parser.parse_args(argv)
    if args.smoke:
        args.prompt, args.generate, args.rounds, args.vocab, args.window = 16, 8, 1, 50, 4
        args.extra = SMOKE_SIZES + args.extra
    return args


@torch.no_grad()
def decode_steps(model, prompt: torch.Tensor, generate: int):
    """Feeds ``prompt`` (B, P) token by token, then ``generate`` greedy tokens, one step per iteration: yields
    each step's ``(wall, CPU)`` seconds; step t's query sits at position t (a prefix of t + 1 tokens)."""
    state, tokens = {}, prompt[:, :1]
    for step in range(prompt.size(1) + generate - 1):
        def one_step():
            logits = model.decoder(tokens, incremental_state=state)[0][:, -1]  # (B, V)
            return prompt[:, step + 1 : step + 2] if step + 1 < prompt.size(1) else logits.argmax(-1, keepdim=True)

        nxt, wall, cpu = stopwatch(one_step)
        tokens = torch.cat([tokens, nxt], dim=1)
        yield wall, cpu


def decode(model, prompt: torch.Tensor, generate: int):
    """Per-step wall and CPU seconds (two lists) of one whole decoding (:func:`decode_steps`)."""
    walls, cpus = zip(*decode_steps(model, prompt, generate))
    return list(walls), list(cpus)


def decode_interleaved(models, prompt: torch.Tensor, generate: int):
    """:func:`decode` of every model at once, taking turns step by step (the first to go rotates), so that the
    models' step t are timed within milliseconds of each other: ``{arch: (walls, cpus)}``."""
    archs = list(models)
    steppers = {arch: decode_steps(models[arch], prompt, generate) for arch in archs}
    times = {arch: ([], []) for arch in archs}
    for step in range(prompt.size(1) + generate - 1):
        for arch in archs[step % len(archs):] + archs[: step % len(archs)]:
            wall, cpu = next(steppers[arch])
            times[arch][0].append(wall)
            times[arch][1].append(cpu)
    return times


def linear_fit(xs, ys):
    """Least-squares ``y = a + b x``: returns ``(a, b)``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / max(1e-30, sum((x - mx) ** 2 for x in xs))
    a = my - b * mx
    return a, b


def ratio_interval(numerators, denominators):
    """Per-round ratios, their geometric mean, its two-sided 95% t-interval and the t-test's p-value against
    0.95x (on the logarithms: ``low``, ``high``, ``p_vs_0.95`` are ``None`` with fewer than 2 rounds)."""
    from scipy import stats

    ratios = [n / d for n, d in zip(numerators, denominators)]
    logs = [math.log(r) for r in ratios]
    out = {"ratios": ratios, "geometric_mean": math.exp(statistics.mean(logs)), "low": None, "high": None,
           "p_vs_0.95": None}
    if len(logs) >= 2:
        half = stats.t.ppf(0.975, len(logs) - 1) * stats.sem(logs)
        out.update(low=math.exp(statistics.mean(logs) - half), high=math.exp(statistics.mean(logs) + half),
                   **{"p_vs_0.95": float(stats.ttest_1samp(logs, math.log(0.95)).pvalue)})
    return out


def main(argv=None):
    args = parse_args(argv)
    info, archs = start(args)
    total = args.prompt + args.generate
    print(f"archs: {' '.join(archs)}; prompt {args.prompt}, generate {args.generate}, batch {args.batch}, "
          f"{args.rounds} rounds, turns every {args.interleave}", flush=True)
    models = {}
    for arch in archs:
        model = build(arch, total, args.vocab, args.extra, optimizer=False)[0].eval()
        models[arch] = model
    device = next(models[archs[0]].parameters()).device
    prompt = torch.randint(4, args.vocab + 4, (args.batch, args.prompt), generator=torch.Generator().manual_seed(0))
    prompt = prompt.to(device)
    for arch in archs:  # warm-up
        decode(models[arch], prompt[:, : min(8, args.prompt)], 2)

    runs = {arch: [] for arch in archs}  # per round: (wall seconds per step, CPU seconds per step)
    for r in range(args.rounds):
        if args.interleave == "step":
            for arch, times in decode_interleaved(models, prompt, args.generate).items():
                runs[arch].append(times)
        else:
            for arch in archs:
                runs[arch].append(decode(models[arch], prompt, args.generate))
        print(f"round {r + 1}: generated tokens per wall/CPU second " + " ".join(
            f"{a}={args.batch * args.generate / sum(runs[a][-1][0][args.prompt - 1:]):.1f}/"
            f"{args.batch * args.generate / sum(runs[a][-1][1][args.prompt - 1:]):.1f}" for a in archs), flush=True)

    half = args.window // 2
    marks = sorted({p for p in (32, 64, 128, 256, 512, 640, 768, total - half - 1) if half <= p < total - half})
    results = {}
    for arch in archs:
        results[arch] = {}
        for clock_name, which in (("wall", 0), ("cpu", 1)):
            # Per step the fastest round: other processes only ever add time, in bursts.
            per_step = [min(run[which][t] for run in runs[arch]) for t in range(total - 1)]
            a, b = linear_fit(list(range(total - 1)), per_step)
            at = {p: statistics.mean(per_step[p - half : p + half]) for p in marks}
            results[arch][clock_name] = {
                "generate_tokens_per_s": [args.batch * args.generate / sum(run[which][args.prompt - 1:]) for run in runs[arch]],
                "prompt_tokens_per_s": [args.batch * (args.prompt - 1) / sum(run[which][: args.prompt - 1]) for run in runs[arch]],
                "ms_per_token_at_prefix": {str(p + 1): 1000 * t for p, t in at.items()},
                "linear_fit_ms": {"intercept": 1000 * a, "per_prefix_token": 1000 * b},
                # Linear growth: the straight line fitted to all steps still predicts the longest prefix.
                "fit_error_at_longest": (a + b * marks[-1]) / at[marks[-1]] - 1 if marks else None,
            }
    for clock_name in ("wall", "cpu"):
        stock = results.get(STOCK_ARCH, {}).get(clock_name)
        print(f"\n{clock_name} time: | arch | generated tok/s | vs stock | prompt tok/s | ms/token at prefix " +
              " | ".join(str(p + 1) for p in marks) + " | fit: ms = a + b x prefix | fit error at longest |")
        print("|---|---:|---:|---:|" + "---:|" * len(marks) + "---|---:|")
        for arch in archs:
            res = results[arch][clock_name]
            ratio = median_ratio(res["generate_tokens_per_s"], stock["generate_tokens_per_s"]) if stock else None
            res["generate_vs_stock"] = ratio
            if stock and arch != STOCK_ARCH:
                res["generate_vs_stock_rounds"] = ratio_interval(res["generate_tokens_per_s"], stock["generate_tokens_per_s"])
            cells = " | ".join(f"{res['ms_per_token_at_prefix'][str(p + 1)]:.2f}" for p in marks)
            fit = res["linear_fit_ms"]
            print(f"| {arch} | {statistics.median(res['generate_tokens_per_s']):.1f} | "
                  f"{'' if ratio is None else f'{ratio:.3f}'} | {statistics.median(res['prompt_tokens_per_s']):.1f} | "
                  f"{cells} | {fit['intercept']:.2f} + {fit['per_prefix_token'] * 1000:.2f}e-3 x | "
                  f"{res['fit_error_at_longest']:+.1%} |")
        for arch in archs:
            rounds = results[arch][clock_name].get("generate_vs_stock_rounds")
            if rounds and rounds["low"] is not None:
                print(f"{arch} / stock, generated tokens per {clock_name} second, over {len(rounds['ratios'])} rounds: "
                      f"geometric mean {rounds['geometric_mean']:.3f}x, 95% t-interval [{rounds['low']:.3f}, "
                      f"{rounds['high']:.3f}], p = {rounds['p_vs_0.95']:.2g} against 0.95x")
    save_results(args, __file__, argv, info, results=results)
    return results


if __name__ == "__main__":
    main()
