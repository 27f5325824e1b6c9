"""Incremental decoding: tokens/s generating after a prompt, and the cost of one token against the prefix length.

Each model (built through fairseq, as in train_throughput.py) decodes the way fairseq's
SequenceGenerator drives it: one token per call of ``model.decoder(tokens, incremental_state=state)``,
keys and values cached. The prompt is fed token by token too (as generation with a prefix does), then
``--generate`` tokens are chosen greedily. Every step is timed, so the per-token cost can be read
against the prefix length: with a key/value cache it should grow linearly (attention over the prefix),
not quadratically. Models take turns within every round.

    python -m benchmarks.decode                      # 512-token prompt, 256 generated, base sizes
    python -m benchmarks.decode --smoke
"""

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
    parser.add_argument("--extra", type=shlex.split, default=[],
                        help="extra fairseq flags for every model, one string: --extra '--urpe-attention-impl dense'")
    args = parser.parse_args(argv)
    if args.smoke:
        args.prompt, args.generate, args.rounds, args.vocab, args.window = 16, 8, 1, 50, 4
        args.extra = SMOKE_SIZES + args.extra
    return args


@torch.no_grad()
def decode(model, prompt: torch.Tensor, generate: int):
    """Per-step wall and CPU seconds of feeding ``prompt`` (B, P) token by token, then ``generate`` greedy tokens."""
    state, tokens, walls, cpus = {}, prompt[:, :1], [], []
    for step in range(prompt.size(1) + generate - 1):
        def one_step():
            logits = model.decoder(tokens, incremental_state=state)[0][:, -1]  # (B, V)
            return prompt[:, step + 1 : step + 2] if step + 1 < prompt.size(1) else logits.argmax(-1, keepdim=True)

        nxt, wall, cpu = stopwatch(one_step)
        walls.append(wall)
        cpus.append(cpu)
        tokens = torch.cat([tokens, nxt], dim=1)
    return walls, cpus  # entry t: the step whose query sits at position t (a prefix of t + 1 tokens)


def linear_fit(xs, ys):
    """Least-squares ``y = a + b x``: returns ``(a, b)``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / max(1e-30, sum((x - mx) ** 2 for x in xs))
    a = my - b * mx
    return a, b


def main(argv=None):
    args = parse_args(argv)
    info, archs = start(args)
    total = args.prompt + args.generate
    print(f"archs: {' '.join(archs)}; prompt {args.prompt}, generate {args.generate}, batch {args.batch}, "
          f"{args.rounds} rounds", flush=True)
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
            cells = " | ".join(f"{res['ms_per_token_at_prefix'][str(p + 1)]:.2f}" for p in marks)
            fit = res["linear_fit_ms"]
            print(f"| {arch} | {statistics.median(res['generate_tokens_per_s']):.1f} | "
                  f"{'' if ratio is None else f'{ratio:.3f}'} | {statistics.median(res['prompt_tokens_per_s']):.1f} | "
                  f"{cells} | {fit['intercept']:.2f} + {fit['per_prefix_token'] * 1000:.2f}e-3 x | "
                  f"{res['fit_error_at_longest']:+.1%} |")
    save_results(args, __file__, argv, info, results=results)
    return results


if __name__ == "__main__":
    main()
