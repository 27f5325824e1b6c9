"""Tables and curves of the investigation's runs (run.sh): ``python -m
experiments.language_modeling.investigation.collect OUT`` reads ``OUT/logs/*.log``
(fairseq-train's simple format) and writes ``OUT/investigation.json``, ``.md`` and ``.png``."""

import json
import re
import sys
from pathlib import Path

from fairseq_urpe.fairseq_runs import mean_std, train_inner_losses, valid_results

ORDER = ["stock", "stock-nope", "stock-postnorm", "t5-zero", "t5-normal0.02", "t5-zero-b-lr10", "t5-alibi", "alibi",
         "urpe-zero", "urpe-zero-c-lr10", "stock-lr1e-3", "stock-postnorm-lr1e-3", "t5-zero-lr1e-3"]
SEED = re.compile(r"-s(\d+)$")  # run "<config>-s<seed>"; seed 1 has the bare config name


def curves(log):
    text = Path(log).read_text()
    train = [(u, float(loss)) for u, loss in train_inner_losses(text).items()]
    valid = [(u, ppl) for _, ppl, u in valid_results(text)]
    return {"train_loss_base2": train, "valid_ppl": valid}


def config_and_seed(name):
    match = SEED.search(name)
    return (name[: match.start()], int(match.group(1))) if match else (name, 1)


def summarize(runs, steps):
    """Per config: its seeds, and mean and sample std over seeds of the training loss at 100 and of the
    validation perplexity at every validation (``steps`` at least; a run that has not reached a step does
    not count there)."""
    by_config = {}
    for name, r in runs.items():
        config, seed = config_and_seed(name)
        by_config.setdefault(config, {})[seed] = r
    summary = {}
    for config in [c for c in ORDER if c in by_config]:
        seeds = by_config[config]
        train100 = mean_std([dict(r["train_loss_base2"]).get(100) for r in seeds.values()])
        every = sorted({u for r in seeds.values() for u, _ in r["valid_ppl"]} | set(steps))
        valid = {s: mean_std([dict(r["valid_ppl"]).get(s) for r in seeds.values()]) for s in every}
        finished = sorted(seed for seed, r in seeds.items() if dict(r["valid_ppl"]).get(steps[-1]) is not None)
        summary[config] = {"seeds": sorted(seeds), "finished_seeds": finished, "train_loss_base2_at_100": train100,
                           "valid_ppl": {str(s): v for s, v in valid.items()}}
    return summary


PAIRS = [("t5-zero", "stock"), ("stock-nope", "stock"), ("stock-postnorm", "stock"), ("alibi", "stock"),
         ("t5-alibi", "t5-zero"), ("t5-normal0.02", "t5-zero"), ("t5-zero-b-lr10", "t5-zero"), ("urpe-zero", "t5-zero"),
         ("urpe-zero-c-lr10", "urpe-zero"), ("t5-alibi", "alibi"), ("t5-zero-lr1e-3", "stock-lr1e-3")]


def paired(runs):
    """Each pair of PAIRS seed by seed: the training loss at 100 and validation perplexity at 100 and 300."""
    by_key = {config_and_seed(name): r for name, r in runs.items()}
    rows = []
    for run, against in PAIRS:
        seeds = sorted(s for (c, s) in by_key if c == run and (against, s) in by_key
                       and dict(by_key[(run, s)]["valid_ppl"]).get(300) is not None
                       and dict(by_key[(against, s)]["valid_ppl"]).get(300) is not None)
        if not seeds:
            continue
        delta = lambda series, step: mean_std([dict(by_key[(run, s)][series]).get(step)
                                               - dict(by_key[(against, s)][series]).get(step) for s in seeds])
        rows.append({"run": run, "against": against, "seeds": seeds, "train100": delta("train_loss_base2", 100),
                     "valid100": delta("valid_ppl", 100), "valid300": delta("valid_ppl", 300)})
    return rows


def main(out):
    out = Path(out)
    runs = {log.stem: curves(log) for log in sorted((out / "logs").glob("*.log"))
            if config_and_seed(log.stem)[0] in ORDER}
    steps = (50, 100, 200, 300)
    summary = summarize(runs, steps)
    (out / "investigation.json").write_text(json.dumps({"summary": summary, "runs": runs}, indent=1) + "\n")
    cell = lambda ms, d=1: "n/a" if ms[0] is None else f"{ms[0]:.{d}f}" + ("" if ms[1] is None else f" ± {ms[1]:.{d}f}")
    lines = ["Mean ± sample std over seeds (finished seeds counted).", "",
             "| run | seeds | train loss (bits) at 100 | " + " | ".join(f"valid ppl {s}" for s in steps) + " |",
             "|---|---:|---:|" + "---:|" * len(steps)]
    for config, c in summary.items():
        lines.append(f"| {config} | {len(c['finished_seeds'])} | {cell(c['train_loss_base2_at_100'], 2)} | "
                     + " | ".join(cell(c["valid_ppl"][str(s)]) for s in steps) + " |")
    lines += ["", "Paired by seed (same seed: same data order and, where the models have the same parameters, the same "
              "initial weights): run − against, mean ± sample std over the seeds both finished.", "",
              "| run | against | seeds | Δ train loss (bits) at 100 | Δ valid ppl 100 | Δ valid ppl 300 |",
              "|---|---|---:|---:|---:|---:|"]
    diffs = paired(runs)
    for row in diffs:
        lines.append(f"| {row['run']} | {row['against']} | {len(row['seeds'])} | {cell(row['train100'], 2)} | "
                     f"{cell(row['valid100'])} | {cell(row['valid300'])} |")
    summary_json = json.loads((out / "investigation.json").read_text())
    summary_json["paired"] = diffs
    (out / "investigation.json").write_text(json.dumps(summary_json, indent=1) + "\n")
    (out / "investigation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("lr 0.003 (the sweep's): stock and T5's start", ["stock", "stock-nope", "stock-postnorm", "t5-zero",
                                                                "t5-alibi", "alibi"]),
              ("lr 0.003: b and c probes", ["t5-zero", "t5-normal0.02", "t5-zero-b-lr10", "t5-alibi", "urpe-zero",
                                            "urpe-zero-c-lr10"]),
              ("lr 0.001", ["stock-lr1e-3", "stock-postnorm-lr1e-3", "t5-zero-lr1e-3"])]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), sharey=False)
    for ax, (title, names) in zip(axes, panels):
        start = 150 if "0.001" in title else 100  # the first validations differ by thousands: left out
        for name in names:
            points = [(int(u), m, sd or 0.0) for u, (m, sd) in summary.get(name, {}).get("valid_ppl", {}).items()
                      if m is not None and int(u) >= start]
            if points:
                xs, ys, es = zip(*points)
                ax.errorbar(xs, ys, yerr=es, marker="o", markersize=3, capsize=2, label=name)
        ax.set_xlabel("updates")
        ax.set_ylabel("valid perplexity (mean ± std over seeds)")
        ax.set_title(f"{title} (from update {start})", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "investigation.png", dpi=110)


if __name__ == "__main__":
    main(sys.argv[1])
