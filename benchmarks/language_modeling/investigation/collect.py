"""Tables and curves of the investigation's runs (run.sh): ``python collect.py OUT`` reads ``OUT/logs/*.log``
(fairseq-train's simple format) and writes ``OUT/investigation.json``, ``.md`` and ``.png``."""

import json
import re
import sys
from pathlib import Path

TRAIN = re.compile(r"\| train_inner \|.* loss=([0-9.]+),.* num_updates=(\d+),")
VALID = re.compile(r"\| valid on 'valid' subset \| loss ([0-9.]+) \| ppl ([0-9.]+) \|.*\| num_updates (\d+)")
ORDER = ["stock", "stock-nope", "stock-postnorm", "t5-zero", "t5-zero-s2", "t5-normal0.02", "t5-zero-b-lr10", "t5-alibi",
         "t5-alibi-s2", "alibi", "urpe-zero", "urpe-zero-c-lr10", "stock-lr1e-3", "stock-postnorm-lr1e-3", "t5-zero-lr1e-3"]


def curves(log):
    text = Path(log).read_text()
    train = [(int(u), float(loss)) for loss, u in TRAIN.findall(text)]
    valid = [(int(u), float(ppl)) for _, ppl, u in VALID.findall(text)]
    return {"train_loss_base2": train, "valid_ppl": valid}


def main(out):
    out = Path(out)
    runs = {log.stem: curves(log) for log in sorted((out / "logs").glob("*.log")) if log.stem in ORDER}
    runs = {name: runs[name] for name in ORDER if name in runs}
    (out / "investigation.json").write_text(json.dumps(runs, indent=1) + "\n")
    steps = (50, 100, 200, 300)
    lines = ["| run | train loss (bits) at 100 | " + " | ".join(f"valid ppl {s}" for s in steps) + " |",
             "|---|---:|" + "---:|" * len(steps)]
    for name, r in runs.items():
        train, valid = dict(r["train_loss_base2"]), dict(r["valid_ppl"])
        cell = lambda v, d=1: "n/a" if v is None else f"{v:.{d}f}"
        lines.append(f"| {name} | {cell(train.get(100), 2)} | " + " | ".join(cell(valid.get(s)) for s in steps) + " |")
    (out / "investigation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("lr 0.003 (the sweep's): stock and T5's start", ["stock", "stock-nope", "stock-postnorm", "t5-zero",
                                                                "t5-zero-s2", "t5-alibi", "t5-alibi-s2", "alibi"]),
              ("lr 0.003: b and c probes", ["t5-zero", "t5-normal0.02", "t5-zero-b-lr10", "t5-alibi", "urpe-zero",
                                            "urpe-zero-c-lr10"]),
              ("lr 0.001", ["stock-lr1e-3", "stock-postnorm-lr1e-3", "t5-zero-lr1e-3"])]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), sharey=False)
    for ax, (title, names) in zip(axes, panels):
        start = 150 if "0.001" in title else 100  # the first validations differ by thousands: left out
        for name in names:
            points = [(u, p) for u, p in runs.get(name, {}).get("valid_ppl", []) if u >= start]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o", markersize=3, label=name,
                        linestyle="--" if name.endswith("-s2") else "-")
        ax.set_xlabel("updates")
        ax.set_ylabel("valid perplexity")
        ax.set_title(f"{title} (from update {start})", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "investigation.png", dpi=110)


if __name__ == "__main__":
    main(sys.argv[1])
