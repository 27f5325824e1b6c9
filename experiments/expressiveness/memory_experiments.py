"""Wang & E (NeurIPS 2024): how the error falls with heads, per memory length, RPE type, QK^T and depth.

    python -m experiments.expressiveness.memory_experiments                  # all four experiments (see docs/expressiveness.md)
    python -m experiments.expressiveness.memory_experiments --smoke          # seconds: every code path, tiny sizes

Every cell trains the model of ``memory_model.py`` (the plugin's RelativeMultiheadAttention and position
modules) from its neutral start, with Adam on fresh batches of ``fairseq_urpe.data.memory_tasks``, once per
seed, and scores the relative error ``E = mean (y_hat - y)^2 / mean y^2`` on 256 held-out sequences at the
positions whose whole memory lies inside the sequence (0 is perfect; 1 is what predicting 0 scores).

  rate    fixed memory y_t = x_{t-T}, lags T; 1 layer, dot-product-free, no FFN (a linear model: E is the
          kernel's approximation error); lin-RPE vs log-RPE, H = 1 .. 16. Claim: the heads needed grow
          exponentially in T for lin-RPE, polynomially for log-RPE.
  heavy   essentially sparse memory y_t = sum_s rho(s) x_{t-s} over memory lengths T (the sequence length),
          rho polynomial (1 + s/2)^-1.5 or exponential (1 + s/4) e^{-s/4}: kernels neither family holds
          exactly; the same model. Claim: log-RPE handles polynomial decay with few heads, lin-RPE does not.
  dpf     fixed (lag T), adaptive (lag chosen by x_t among T/4 .. T) and content-addressed (a control; T only
          sets the sequence length T + 32) memory, lags T = 8, 16, 32; 1 layer with FFN, a learned bias per
          distance, with and without Q K^T. Claim: dot-product-free attention suffices for fixed memory, not
          for adaptive memory.
  depth   nested memory (the second lag chosen by the token the first one points at) at scales s = 1, 2, 4:
          first lags (2s, 6s), second lags (3s, 9s), T = the deepest lag 9s; dot product, a learned bias per
          distance, FFN; 1, 2, 3 layers x H. Claim: depth, not heads, handles nesting.

For each experiment and row the H needed to reach a relative error ``--threshold`` is read off the mean
curve (log-log interpolation between grid points) and, over memory lengths, fitted by ``H* ~ T^slope``.
Writes ``<out>/memory_runs.jsonl`` (one line per trained model; a rerun skips those already there),
``memory_results.json``, ``memory_results.md`` and ``memory_<experiment>.png``.
"""

import argparse
import json
import math
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

EXPERIMENTS = ("rate", "heavy", "dpf", "depth")
SIZES = {
    # steps, batch, heads grid, rate lags, heavy lengths, dpf lags, depth layers and nesting scales
    "full": dict(steps=600, batch=512, heads=[1, 2, 4, 8, 16], rate_lags=[4, 8, 16, 32], fit_lags=[4, 8, 16, 32, 64, 128],
                 fit_restarts=12, heavy_lengths=[8, 32, 128],
                 dpf_lags=[8, 16, 32], dpf_heads=[1, 2, 4, 8], layers=[1, 2, 3], depth_heads=[1, 2, 4, 8],
                 depth_scales=[1, 2, 4], seeds=[0, 1, 2]),
    "smoke": dict(steps=3, batch=16, heads=[1, 2], rate_lags=[2, 4], fit_lags=[2, 4], fit_restarts=1,
                  heavy_lengths=[8, 16], dpf_lags=[4, 8],
                  dpf_heads=[1, 2], layers=[1, 2], depth_heads=[1, 2], depth_scales=[1, 2], seeds=[0, 1]),
}
EVAL_BATCH, LR, POSITION_LR = 256, 3e-3, 3e-2
THRESHOLDS = {"rate": 0.9, "heavy": 0.005, "dpf": 0.1, "depth": 0.1}
NESTED_LAGS, NESTED_LAGS2 = (2, 6), (3, 9)  # at scale s: (2s, 6s) then (3s, 9s); the group T is 9s


def nested_lags(scale):
    """The nested memory's first and second lags at ``scale``."""
    return [scale * lag for lag in NESTED_LAGS], [scale * lag for lag in NESTED_LAGS2]


def cells(a):
    """``[(experiment, row, group, x, config)]``: group = memory length (or None), x = heads or layers."""
    out = []
    for kind in ("lin", "log"):
        for lag in a.rate_lags:
            for h in a.heads:
                out.append(("rate", f"{kind}-RPE", lag, h, dict(task="fixed", params={"lags": [lag]}, length=lag + 32,
                            start=lag, kind=kind, dot_product=False, ffn=False, layers=1, heads=h)))
    for kernel in ("poly", "exp"):
        for kind in ("lin", "log"):
            for length in a.heavy_lengths:
                params = {"kernel": kernel, "scale": 2.0 if kernel == "poly" else 4.0, "alpha": 1.5}
                for h in a.heads:
                    out.append(("heavy", f"{kernel} / {kind}-RPE", length, h, dict(
                        task="kernel", params=params, length=length, start=length // 2, kind=kind,
                        dot_product=False, ffn=False, layers=1, heads=h)))
    for task in ("fixed", "adaptive", "content"):
        for dot_product in (True, False):
            for lag in a.dpf_lags:
                adaptive = [lag * k // 4 for k in range(1, 5)]  # T/4, T/2, 3T/4, T
                params, start = {"fixed": ({"lags": [lag]}, lag), "adaptive": ({"lags": adaptive}, lag),
                                 "content": ({}, 0)}[task]
                for h in a.dpf_heads:
                    out.append(("dpf", f"{task} / {'QK^T' if dot_product else 'no QK^T'}", lag, h, dict(
                        task=task, params=params, length=lag + 32, start=start, kind="learned",
                        dot_product=dot_product, ffn=True, layers=1, heads=h)))
    for layers in a.layers:
        for scale in a.depth_scales:
            lags, lags2 = nested_lags(scale)
            deepest = lags2[-1]
            for h in a.depth_heads:
                out.append(("depth", f"nested / {layers} layer{'s' if layers > 1 else ''}", deepest, h, dict(
                    task="nested", params={"lags": lags, "lags2": lags2}, length=deepest + 32,
                    start=deepest, kind="learned", dot_product=True, ffn=True, layers=layers, heads=h)))
    return [c for c in out if c[0] in a.only]


def train_eval(config, seed, steps, batch):
    """Train one model from its neutral start; ``(relative error, seconds)``. ``batch`` counts scored
    positions: a step draws ``ceil(batch / scored positions per sequence)`` sequences."""
    import torch

    from experiments.expressiveness.memory_model import MemoryModel
    from fairseq_urpe.data.memory_tasks import memory_batch

    torch.set_num_threads(1)
    start_time = time.time()
    task, params, length, start = config["task"], config["params"], config["length"], config["start"]
    sequences = -(-batch // (length - start))
    x_eval, y_eval = memory_batch(task, EVAL_BATCH, length, seed=10**6 + seed, **params)
    model = MemoryModel(x_eval.size(-1), 4 * config["heads"], config["heads"], config["layers"], config["kind"],
                        config["dot_product"], config["ffn"], length, seed=seed)
    position = model.position_parameters()
    others = [p for p in model.parameters() if all(p is not q for q in position)]
    groups = [{"params": others, "lr": LR}] + ([{"params": position, "lr": POSITION_LR}] if position else [])
    opt = torch.optim.Adam(groups)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[g["lr"] for g in groups], total_steps=steps,
                                                   pct_start=0.1)
    for step in range(steps):
        x, y = memory_batch(task, sequences, length, seed=seed * 10**5 + step, **params)
        loss = (model(x)[:, start:] - y[:, start:]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
    with torch.no_grad():
        error = (model(x_eval)[:, start:] - y_eval[:, start:]).pow(2).mean() / y_eval[:, start:].pow(2).mean()
    return float(error), time.time() - start_time


def add_best_fits(results, a, thresholds):
    """Rows "<kind>-RPE, best fit" in the rate results: the smallest error of a direct fit of the kernel family
    (``kernel_fit.py``), a bound on what training can reach, also at lags too long to train here."""
    import torch

    from experiments.expressiveness.kernel_fit import best_fit

    torch.set_num_threads(1)
    for kind in ("lin", "log"):
        cells_ = {str(lag): {str(h): {"mean": best_fit(kind, h, lag, a.fit_restarts), "std": 0.0, "seeds": []}
                             for h in a.heads} for lag in a.fit_lags}
        for c in cells_.values():
            for v in c.values():
                v["seeds"] = [v["mean"]]
        needed = {g: heads_needed([int(x) for x in c], [v["mean"] for v in c.values()], thresholds["rate"])
                  for g, c in cells_.items()}
        results["rate"][f"{kind}-RPE, best fit"] = {
            "cells": cells_, "needed": needed, "slope": fit_slope([int(g) for g in needed], list(needed.values()))}


def key_of(experiment, row, group, x, seed):
    return f"{experiment}|{row}|{group}|{x}|{seed}"


def recorded_key(record):
    """The key of a line of ``memory_runs.jsonl`` in today's cells. Depth models recorded when the nested
    memory had one scale carry group None; their config is the scale-1 cell's, whose group is now its
    deepest lag."""
    experiment, row, group, x, seed = record["key"].split("|")
    if experiment == "depth" and group == "None" and record["config"]["params"] == dict(
            zip(("lags", "lags2"), nested_lags(1))):
        return key_of(experiment, row, NESTED_LAGS2[-1], x, seed)
    return record["key"]


def heads_needed(xs, errors, threshold):
    """Smallest x where the mean error curve reaches ``threshold`` (log-log interpolation), or None."""
    points = sorted(zip(xs, errors))
    for (x0, e0), (x1, e1) in zip([(None, None)] + points[:-1], points):
        if e1 <= threshold:
            if x0 is None or e0 <= threshold:
                return float(x1)
            w = (math.log(e0) - math.log(threshold)) / (math.log(e0) - math.log(max(e1, 1e-12)))
            return math.exp(math.log(x0) + w * (math.log(x1) - math.log(x0)))
    return None


def fit_slope(groups, needed):
    """Least-squares slope of log H* against log T over the lengths where H* was reached."""
    pairs = [(math.log(g), math.log(n)) for g, n in zip(groups, needed) if n is not None]
    if len(pairs) < 2:
        return None
    mx, my = statistics.fmean(p[0] for p in pairs), statistics.fmean(p[1] for p in pairs)
    return sum((px - mx) * (py - my) for px, py in pairs) / sum((px - mx) ** 2 for px, _ in pairs)


def summarise(cell_list, runs, seeds, thresholds):
    """``{experiment: {row: {group: {x: {"mean", "std", "seeds"}}, "needed": {group: H*}, "slope"}}}``."""
    results = {}
    for experiment, row, group, x, _ in cell_list:
        errors = [runs[key_of(experiment, row, group, x, s)]["error"] for s in seeds
                  if key_of(experiment, row, group, x, s) in runs]
        if not errors:
            continue
        entry = results.setdefault(experiment, {}).setdefault(row, {"cells": {}})
        entry["cells"].setdefault(str(group), {})[str(x)] = {
            "mean": statistics.fmean(errors), "std": statistics.stdev(errors) if len(errors) > 1 else 0.0,
            "seeds": errors}
    for experiment, rows in results.items():
        for row in rows.values():
            row["needed"] = {g: heads_needed([int(x) for x in c], [v["mean"] for v in c.values()],
                                             thresholds[experiment]) for g, c in row["cells"].items()}
            groups = [g for g in row["needed"] if g != "None"]
            row["slope"] = fit_slope([int(g) for g in groups], [row["needed"][g] for g in groups]) if groups else None
    return results


TITLES = {
    "rate": "fixed memory y_t = x_{t-T}: 1 layer, no QK^T, no FFN",
    "heavy": "essentially sparse memory over length T: 1 layer, no QK^T, no FFN",
    "dpf": "memory at lags up to T, with and without QK^T: 1 layer + FFN, a bias per distance",
    "depth": "nested memory (lags (2s, 6s) then (3s, 9s), T = 9s): QK^T, a bias per distance, FFN",
}
X_NAME = {"rate": "heads", "heavy": "heads", "dpf": "heads", "depth": "heads"}


def markdown(results, thresholds, header):
    lines = [header]
    for experiment, rows in results.items():
        group_name = "T"
        xs = sorted({int(x) for r in rows.values() for c in r["cells"].values() for x in c})
        lines += ["", f"**{experiment}**: {TITLES[experiment]}. Relative error, mean ± std over seeds (a best "
                  f"fit is one number); H* = heads to reach {thresholds[experiment]}", "",
                  "| row | " + (f"{group_name} | " if group_name else "") + " | ".join(f"H={x}" for x in xs)
                  + " | H* |", "|---|" + ("---|" if group_name else "") + "---:|" * (len(xs) + 1)]
        for row, entry in rows.items():
            for group, c in entry["cells"].items():
                needed = entry["needed"][group]
                cells_text = ["" if str(x) not in c else f"{c[str(x)]['mean']:.3g}" if len(c[str(x)]["seeds"]) == 1
                              else f"{c[str(x)]['mean']:.3g} ± {c[str(x)]['std']:.1g}" for x in xs]
                lines.append(f"| {row} | " + (f"{group} | " if group_name else "") + " | ".join(cells_text)
                             + f" | {'> ' + str(max(xs)) if needed is None else f'{needed:.1f}'} |")
        slopes = {row: e["slope"] for row, e in rows.items()}
        if slopes:
            lines += ["", "fitted H* ~ T^slope: " + "; ".join(
                f"{row}: {'n/a (H* reached at fewer than 2 lengths)' if s is None else f'{s:.2f}'}"
                for row, s in slopes.items())]
    return "\n".join(lines)


def plot(results, thresholds, out):
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    for experiment, rows in results.items():
        with_rate = any(len(entry["cells"]) > 1 for entry in rows.values())  # a second panel: H* vs T
        fig, axes = plt.subplots(1, 2 if with_rate else 1, figsize=(11 if with_rate else 6, 4.2), squeeze=False)
        ax = axes[0][0]
        for i, (row, entry) in enumerate(rows.items()):
            groups = list(entry["cells"])
            for j, (group, c) in enumerate(entry["cells"].items()):
                xs = sorted(int(x) for x in c)
                # one legend entry per row; its lengths from light to dark
                label = (None if j < len(groups) - 1 else row if group == "None" else f"{row}, T={group}"
                         if len(groups) == 1 else f"{row}, T = {' / '.join(groups)} (light → dark)")
                fit = "best fit" in row
                ax.errorbar(xs, [max(c[str(x)]["mean"], 1e-6) for x in xs], yerr=[c[str(x)]["std"] for x in xs],
                            marker="o", markersize=3, capsize=2, color=f"C{i % 2 if fit else i}",
                            linestyle="--" if fit else "-", alpha=0.35 + 0.65 * (j + 1) / len(entry["cells"]),
                            label=label)
        ax.axhline(thresholds[experiment], color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("heads H")
        ax.set_ylabel("relative error (mean ± std over seeds)")
        ax.set_title(TITLES[experiment], fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=1 if len(rows) < 5 else 2)
        if with_rate:
            ax = axes[0][1]
            for i, (row, entry) in enumerate(rows.items()):
                pts = [(int(g), n) for g, n in entry["needed"].items() if n is not None]
                if pts:
                    gs, ns = zip(*sorted(pts))
                    slope = entry["slope"]
                    fit = "best fit" in row
                    ax.plot(gs, ns, marker="o", color=f"C{i % 2 if fit else i}", linestyle="--" if fit else "-",
                            label=f"{row}" + ("" if slope is None else f" (slope {slope:.2f})"))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log", base=2)
            # H* lies between 1 and the largest H of the grid: show that whole range, ticks as plain numbers
            largest = max(int(x) for entry in rows.values() for c in entry["cells"].values() for x in c)
            ax.set_ylim(0.8, largest * 1.25)
            ax.set_xticks(sorted({int(g) for entry in rows.values() for g in entry["cells"]}))
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
            ax.set_xlabel("deepest lag T (nesting scale s = T / 9)" if experiment == "depth"
                          else "memory length / lag T")
            ax.set_ylabel(f"H needed for error {thresholds[experiment]}")
            ax.set_title("heads needed vs T (log-log); missing: not reached with the largest H", fontsize=8)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / f"memory_{experiment}.png", dpi=110)
        plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes and 3 steps: checks every code path in seconds")
    p.add_argument("--only", default=" ".join(EXPERIMENTS), help="experiments to run")
    p.add_argument("--out", default="benchmark-out/memory")
    p.add_argument("--steps", type=int, default=None, help="override the training steps")
    p.add_argument("--seeds", default=None, help="override the seeds, e.g. '0 1 2'")
    p.add_argument("--jobs", type=int, default=2, help="models trained at once, one core each")
    a = p.parse_args(argv)
    for key, value in SIZES["smoke" if a.smoke else "full"].items():
        setattr(a, key, value if getattr(a, key, None) is None else getattr(a, key))
    a.seeds = [int(s) for s in a.seeds.split()] if isinstance(a.seeds, str) else a.seeds
    a.only = a.only.split()
    thresholds = THRESHOLDS
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "memory_runs.jsonl"
    runs = {}
    if log_path.exists():
        for line in log_path.read_text().splitlines():
            record = json.loads(line)
            if record["steps"] == a.steps and record["batch"] == a.batch:
                runs[recorded_key(record)] = record
    cell_list = cells(a)
    todo = [(c, s) for c in cell_list for s in a.seeds if key_of(*c[:4], s) not in runs]
    # Largest first, so that the pool ends together.
    todo.sort(key=lambda job: -(job[0][4]["heads"] * job[0][4]["layers"] * job[0][4]["length"] ** 2
                                * (3 if job[0][4]["dot_product"] else 1)))
    print(f"{len(cell_list) * len(a.seeds)} models ({len(todo)} to train), {a.steps} steps of batch {a.batch}, "
          f"seeds {a.seeds}, {a.jobs} at once", flush=True)
    start = time.time()

    def record(cell, seed, error, seconds):
        experiment, row, group, x, config = cell
        entry = {"key": key_of(experiment, row, group, x, seed), "error": error, "seconds": seconds,
                 "steps": a.steps, "batch": a.batch, "config": config}
        runs[entry["key"]] = entry
        log.write(json.dumps(entry) + "\n")
        log.flush()
        print(f"  {experiment:5s} {row:24s} T={group} H={x} seed {seed}: {error:.4f} ({seconds:.0f} s)", flush=True)

    with open(log_path, "a") as log:
        if a.jobs <= 1:  # in this process (the smoke test)
            for cell, seed in todo:
                record(cell, seed, *train_eval(cell[4], seed, a.steps, a.batch))
        else:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=a.jobs, mp_context=context) as pool:
                futures = {pool.submit(train_eval, c[4], s, a.steps, a.batch): (c, s) for c, s in todo}
                for future in as_completed(futures):
                    record(*futures[future], *future.result())
    results = summarise(cell_list, runs, a.seeds, thresholds)
    if "rate" in a.only:
        add_best_fits(results, a, thresholds)
    wall = time.time() - start
    compute = sum(runs[key_of(*c[:4], s)]["seconds"] for c in cell_list for s in a.seeds)
    header = (f"{a.steps} Adam steps of {a.batch} scored positions per model (lr {LR}, position parameters {POSITION_LR}, "
              f"one-cycle), seeds {a.seeds}; {compute / 60:.1f} model-min of training in all (this invocation "
              f"trained {len(todo)} models, {a.jobs} at once, and took {wall / 60:.1f} min wall including the "
              f"best fits). Relative error on {EVAL_BATCH} held-out sequences.")
    table = markdown(results, thresholds, header)
    print(table)
    (out / "memory_results.md").write_text(table + "\n")
    (out / "memory_results.json").write_text(json.dumps(
        {"settings": {k: v for k, v in vars(a).items()}, "thresholds": thresholds, "wall_seconds": wall,
         "model_seconds": compute, "results": results}, indent=1))
    plot(results, thresholds, out)
    print(f"wrote {out / 'memory_results.md'} and the plots memory_<experiment>.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
