"""The confirmatory test of docs/language_modeling.md ("A confirmatory test"), fixed before its runs.

    SEEDS="6 7 8 9 10" CONFIGS="t5,t5+C bucketed,t5 zero-start,t5 zero-start+C bucketed,kerple,kerple+C bucketed" \\
        OUT=benchmark-out/confirmatory bash experiments/language_modeling/run_brown.sh
    python -m experiments.language_modeling.confirmatory benchmark-out/confirmatory/results.json   # -> confirmatory.md

Two differences, per seed at L (test perplexity, the sweep's cpu preset), on seeds 6-10 only (seeds 1-5 are the
exploratory data and are not pooled):

    interaction   [ppl(t5 zero-start+C bucketed) - ppl(t5 zero-start)] - [ppl(t5+C bucketed) - ppl(t5)]
    C on KERPLE   ppl(kerple+C bucketed) - ppl(kerple)

Each: the paired two-sided t-test on its 5 per-seed values (df = 4), with the 95% t-interval of the mean; both p
Holm-adjusted over these 2 tests (a test without its 5 seeds counts as p = 1). **Confirmed**: all 5 seeds present, Holm p < ALPHA and the mean's sign the one the
exploratory data showed (both negative); **not confirmed**: all 5 present and not that; **incomplete**: fewer than
5 seeds with every cell the difference needs (no verdict).
"""

import json
import sys
from pathlib import Path

from experiments.language_modeling.brown_sweep import holm, mean_std, paired_t

SEEDS = (6, 7, 8, 9, 10)
ALPHA = 0.05
FACTOR = "1"  # L
# name -> (expected sign, {config: coefficient}): the difference is sum(coefficient * ppl)
TESTS = {
    "init x C interaction": (-1, {"t5 zero-start+C bucketed": 1, "t5 zero-start": -1, "t5+C bucketed": -1, "t5": 1}),
    "C on KERPLE": (-1, {"kerple+C bucketed": 1, "kerple": -1}),
}
CONFIGS = tuple(dict.fromkeys(c for _, cells in TESTS.values() for c in cells))


def differences(runs):
    """``{test: {seed: difference}}`` over SEEDS, for the seeds that have every cell of the test."""
    ppl = {(r["config"], r["seed"]): r["test_ppl"].get(FACTOR) for r in runs if "test_ppl" in r}
    out = {}
    for name, (_, cells) in TESTS.items():
        out[name] = {s: sum(k * ppl[(c, s)] for c, k in cells.items()) for s in SEEDS
                     if all(ppl.get((c, s)) is not None for c in cells)}
    return out


def verdicts(diffs):
    """``{test: {"per_seed", "mean", "std", "low", "high", "p", "p_holm", "verdict"}}``."""
    stats = {}
    for name, per_seed in diffs.items():
        values = [per_seed[s] for s in sorted(per_seed)]
        mean, std = mean_std(values)
        stats[name] = {"per_seed": per_seed, "mean": mean, "std": std, **paired_t(values)}
    complete = {n for n, s in stats.items() if len(s["per_seed"]) == len(SEEDS) and s["p"] is not None}
    adjusted = holm({n: stats[n]["p"] if n in complete else 1.0 for n in stats})  # always the 2 planned tests
    for name, s in stats.items():
        if name not in complete:
            s.update(p_holm=None, verdict=f"incomplete ({len(s['per_seed'])} of {len(SEEDS)} seeds)")
            continue
        s["p_holm"] = adjusted[name]
        sign_ok = (s["mean"] > 0) == (TESTS[name][0] > 0)
        s["verdict"] = "confirmed" if s["p_holm"] < ALPHA and sign_ok else "not confirmed"
    return stats


def markdown(stats):
    lines = [f"Confirmatory test at L, seeds {', '.join(map(str, SEEDS))} (planned in docs/language_modeling.md before "
             f"its runs): paired two-sided t-test (df = n - 1), Holm over the {len(TESTS)} tests, confirmed where Holm "
             f"p < {ALPHA} with the expected sign (negative).", "",
             "| test | " + " | ".join(f"seed {s}" for s in SEEDS) + " | mean ± std | 95% interval | p | Holm p | verdict |",
             "|---|" + "---:|" * (len(SEEDS) + 1) + "---|---:|---:|---|"]
    for name, s in stats.items():
        seeds = " | ".join(f"{s['per_seed'][k]:.2f}" if k in s["per_seed"] else "–" for k in SEEDS)
        mean = f"{s['mean']:.2f} ± {s['std']:.2f}" if s["std"] is not None else ("–" if s["mean"] is None else f"{s['mean']:.2f}")
        interval = f"[{s['low']:.2f}, {s['high']:.2f}]" if s["low"] is not None else "–"
        p = f"{s['p']:.2g}" if s["p"] is not None else "–"
        holm_p = f"{s['p_holm']:.2g}" if s["p_holm"] is not None else "–"
        lines.append(f"| {name} | {seeds} | {mean} | {interval} | {p} | {holm_p} | {s['verdict']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__)
        return 2
    path = Path(argv[0])
    stats = verdicts(differences(json.loads(path.read_text())["runs"]))
    text = markdown(stats)
    (path.parent / "confirmatory.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
