"""Wang & E (NeurIPS 2024): memory tasks built so that each can show its claim, one verdict each.

    python -m experiments.expressiveness.memory_claims              # fits and trained models, 3 seeds, 2 processes
    python -m experiments.expressiveness.memory_claims --smoke      # seconds

Every score is at **one position that sees the same number of keys** (the last of a fixed-length sequence), so
no softmax normaliser varies between scored positions. Thresholds and verdict rules are in ``RULES``, fixed
before any run. Two kinds of experiment:

**Best fits** (float64, deterministic: amplitudes by weighted least squares, slopes by L-BFGS from ``RESTARTS``
log-uniform starts). A one-layer dot-product-free model without an FFN is linear; at the last of ``N`` positions
its kernel is ``k(l) = c [l = 0] + sum_h a_h softmax_l(p_h phi(l))`` over lags ``l = 0 .. N-1`` (the paper's phi:
``phi_log(0) = -inf``), and for white-noise inputs its error is a weighted distance between ``k`` and the target
kernel ``r``. The smallest found bounds what training can reach (from above), at lengths training cannot.

    rate    r = [l = T] (fixed memory at lag T), N = 2T, T = 64, 256, 1024, unweighted: E = ||k - r||^2 (1 is
            predicting 0). The paper's bounds: heads ~ e^{0.01 T} (lin) vs T^{1.01} (log); they cross near
            T = 650, so only T = 1024 is on the side where log should win.
    decay   r = (1 + l/2)^{-3/2} (polynomial; no single log head: the offset) over N = 1024 and
            (1 + l/4) e^{-l/4} (exponential; no single lin head: a repeated pole) over N = 128, weighted by 1/r^2,
            so every lag counts alike: E = mean_l ((k - r) / r)^2; also the largest |k - r| / r per band of lags.

**Trained** (the plugin's ``RelativeMultiheadAttention`` in ``memory_model.MemoryModel``: a learned bias per
distance, pre-norm FFN of width 4W, W = 32; inputs uniform with variance 1, a value channel, selector channels,
and a start-of-sequence channel that is 1 at position 0 only, so that a first layer can write position into the
keys; Adam lr 3e-3, cosine, ``STEPS`` steps of 256 sequences of length 20; relative error MSE / Var(y) on 4096
held-out sequences):

    adaptive   y = x_{t - g(x_t)}, g uniform over 1..16 (from x_t's selector); H = 4 < 16; 1 and 2 layers,
               with and without QK^T.
    nested     depth K = 1: the adaptive memory with g over 1..8; K = 2: t1 = g1(x_t) in 1..8,
               t2 = g2(x_{t-t1}) in 1..8, y = x_{t - t2}; QK^T, H = 4 < 8; K = 1 with 2 layers, K = 2 with 2 and 3
               (the paper: K + 1 layers).
    summax     two memories, y = x_{t - g1(x_t)} + x_{t - g2(x_t)} (two selectors, each over 1..16); QK^T;
               2 layers with H = 1 and 2, 3 layers with H = 1 (Prop 4.5: M + 1 layers need the max over
               memories, 2 layers their sum).
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

from experiments.expressiveness.runs_file import add_runner_options, read_runs

RESTARTS, FIT_ITERS = 2, 50
RATE_LAGS, FIT_HEADS, RATE_THRESHOLD = (64, 256, 1024), (1, 4, 16, 32), 0.5
DECAY = {"poly": (1024, lambda l: (1 + l / 2) ** -1.5), "exp": (128, lambda l: (1 + l / 4) * math_exp(-l / 4))}
DECAY_THRESHOLD = 0.05  # RMS per-lag relative error
BANDS = ((0, 10), (10, 100), (100, 1024))
LENGTH, STEPS, BATCH, EVAL, WIDTH, LR = 20, 1000, 256, 4096, 32, 3e-3
RULES = {
    "rate": "at T = 1024: reproduced if log reaches E <= 0.5 with fewer heads than lin; contradicted if lin with "
            "fewer than log; not separable by this instance if neither reaches it with 32 heads or both with the same",
    "decay_poly": "N = 1024: reproduced if log reaches RMS per-lag relative error <= 0.05 with fewer heads than lin; "
                  "contradicted if lin with fewer or as few; not separable if neither with 32 heads",
    "decay_exp": "N = 128: reproduced if lin reaches RMS per-lag relative error <= 0.05 with fewer heads than log; "
                 "contradicted if log with fewer or as few; not separable if neither with 32 heads",
    "adaptive": "H = 4 < 16: reproduced if 2 layers with QK^T reach relative error <= 0.1 while 2 layers without stay "
                ">= 0.5; contradicted if 2 layers without QK^T reach <= 0.1; else not separable",
    "nested": "H = 4 < 8: reproduced if K = 2 reaches <= 0.1 with 3 layers and stays >= 0.3 with 2, and K = 1 reaches "
              "<= 0.1 with 2; contradicted if K = 2 reaches <= 0.1 with 2 layers; else not separable",
    "summax": "reproduced if with H = 1, 3 layers reach <= 0.1 while 2 layers stay >= 0.3; contradicted if 2 layers "
              "with H = 1 reach <= 0.1; else not separable",
}
SMOKE = dict(rate_lags=(8, 16), fit_heads=(1, 2), restarts=1, iters=5, decay_lengths={"poly": 32, "exp": 16},
             steps=3, batch=16, eval=64)


def math_exp(v):
    import torch

    return torch.exp(v) if hasattr(v, "dtype") else math.exp(v)


# ---------------------------------------------------------------- best fits

def kernel_basis(kind, slopes, n):
    """``(N, 1 + H)`` float64: ``[l = 0]`` and each head's softmax over lags ``0 .. N-1``."""
    import torch

    from experiments.expressiveness.last_row import phi

    lags = torch.arange(n, dtype=torch.float64)
    values = phi(kind, lags)
    never = torch.isinf(values)
    bias = (slopes[:, None] * values.masked_fill(never, 0.0)[None]).masked_fill(never[None], -math.inf)
    direct = torch.zeros(1, n, dtype=torch.float64)
    direct[0, 0] = 1.0
    return torch.cat([direct, torch.softmax(bias, -1)]).T


def fit_error(kind, slopes, target, weight):
    """``(E, kernel)``: the best amplitudes for ``slopes`` by weighted least squares; ``E = sum w (k - r)^2 / sum w r^2``."""
    import torch

    basis = kernel_basis(kind, slopes, target.numel())
    if not torch.isfinite(basis).all():  # slopes that overflowed: no fit here
        return torch.tensor(math.inf, dtype=torch.float64), None
    root = weight.sqrt()[:, None]
    amplitudes = torch.linalg.lstsq(basis * root, (target * weight.sqrt())[:, None]).solution
    kernel = (basis @ amplitudes).squeeze(1)
    return (weight * (kernel - target) ** 2).sum() / (weight * target**2).sum(), kernel


def best_fit(kind, heads, target, weight, restarts=RESTARTS, iters=FIT_ITERS, seed=0):
    """Smallest ``E`` found, and its kernel."""
    import torch

    n = target.numel()
    low, high = (1 / (4 * n), 4.0) if kind == "lin" else (1 / 16, 16.0)
    generator = torch.Generator().manual_seed(seed)
    best, best_kernel = math.inf, None
    for _ in range(restarts):
        u = torch.rand(heads, generator=generator, dtype=torch.float64)
        log_slopes = (math.log(low) + u * (math.log(high) - math.log(low))).requires_grad_()
        optimiser = torch.optim.LBFGS([log_slopes], max_iter=iters, line_search_fn="strong_wolfe")

        def closure():
            optimiser.zero_grad()
            error = fit_error(kind, torch.exp(log_slopes), target, weight)[0]
            if error.requires_grad:
                error.backward()
            return error

        try:
            optimiser.step(closure)
        except RuntimeError:  # a singular least-squares step: keep what was reached
            pass
        try:
            with torch.no_grad():
                error, kernel = fit_error(kind, torch.exp(log_slopes), target, weight)
        except RuntimeError:
            continue
        if math.isfinite(float(error)) and float(error) < best:
            best, best_kernel = float(error), kernel
    return best, best_kernel


def heads_needed(curve, threshold):
    """Smallest H of the grid whose error is <= threshold, or None."""
    reached = [int(h) for h, e in curve.items() if e <= threshold]
    return min(reached) if reached else None


def compare(needed_good, needed_bad, tie="contradicted"):
    """The rule's three outcomes for "the kind that should win needs fewer heads"; ``tie``: both need the same."""
    if needed_good is None and needed_bad is None:
        return "not separable by this instance"
    if needed_good == needed_bad:
        return tie
    if needed_bad is None or (needed_good is not None and needed_good < needed_bad):
        return "reproduced"
    return "contradicted"


def run_fits(size):
    import torch

    torch.set_num_threads(1)
    start = time.time()
    out = {"rate": {}, "decay": {}}
    for lag in size["rate_lags"]:
        target = torch.zeros(2 * lag, dtype=torch.float64)
        target[lag] = 1.0
        for kind in ("lin", "log"):
            out["rate"].setdefault(kind, {})[str(lag)] = {
                str(h): best_fit(kind, h, target, torch.ones_like(target), size["restarts"], size["iters"])[0]
                for h in size["fit_heads"]}
    for name, (n, rho) in DECAY.items():
        n = size["decay_lengths"].get(name, n)
        lags = torch.arange(n, dtype=torch.float64)
        target = rho(lags)
        weight = 1 / target**2
        for kind in ("lin", "log"):
            cells = {}
            for h in size["fit_heads"]:
                error, kernel = best_fit(kind, h, target, weight, size["restarts"], size["iters"])
                relative = ((kernel - target) / target).abs() if kernel is not None else None
                bands = {f"{a}-{min(b, n)}": float(relative[a:b].max()) for a, b in BANDS if a < n} if kernel is not None else {}
                cells[str(h)] = {"rms": math.sqrt(error) if math.isfinite(error) else None, "band_max": bands}
            out["decay"].setdefault(name, {})[kind] = {"length": n, "cells": cells}
    out["seconds"] = time.time() - start
    return out


def fit_verdicts(fits, size):
    lag = str(max(size["rate_lags"]))
    v = {"rate": compare(heads_needed(fits["rate"]["log"][lag], RATE_THRESHOLD),
                         heads_needed(fits["rate"]["lin"][lag], RATE_THRESHOLD), tie="not separable by this instance")}
    for name, good, bad in (("poly", "log", "lin"), ("exp", "lin", "log")):
        curves = {k: {h: c["rms"] if c["rms"] is not None else math.inf
                      for h, c in fits["decay"][name][k]["cells"].items()} for k in (good, bad)}
        v[f"decay_{name}"] = compare(heads_needed(curves[good], DECAY_THRESHOLD),
                                     heads_needed(curves[bad], DECAY_THRESHOLD))
    return v


# ---------------------------------------------------------------- trained models

def trained_cells():
    """``[(experiment, row, config)]``."""
    out = []
    for layers, dp in ((1, True), (2, True), (2, False)):
        out.append(("adaptive", f"{layers} layer{'s' * (layers > 1)}, {'QK^T' if dp else 'no QK^T'}", dict(
            task="adaptive", lags=16, heads=4, layers=layers, dot_product=dp)))
    for depth, layers in ((1, 2), (2, 2), (2, 3)):
        out.append(("nested", f"K = {depth}", dict(task="nested" if depth == 2 else "adaptive", lags=8, heads=4,
                                                  layers=layers, dot_product=True)))
    for layers, h in ((2, 1), (2, 2), (3, 1)):
        out.append(("summax", f"{layers} layers", dict(task="summax", lags=16, heads=h, layers=layers, dot_product=True)))
    return out


def memory_batch(task, lags, batch, length, rng):
    """``(x (B, N, C) float32, y (B,) float32)`` at the last position; channels: value, selector(s), start."""
    import numpy as np
    import torch

    from fairseq_urpe.data.memory_tasks import LIMIT, selector_bins

    selectors = 2 if task == "summax" else 1
    x = rng.uniform(-LIMIT, LIMIT, size=(batch, length, 1 + selectors))
    start = np.zeros((batch, length, 1))
    start[:, 0] = 1.0
    t = length - 1
    rows = np.arange(batch)
    first = 1 + selector_bins(x[:, t, 1], lags)  # g(x_t) in 1..lags
    if task == "adaptive":
        y = x[rows, t - first, 0]
    elif task == "nested":
        second = 1 + selector_bins(x[rows, t - first, 1], lags)  # g2(x_{t - t1})
        y = x[rows, t - second, 0]
    elif task == "summax":
        other = 1 + selector_bins(x[:, t, 2], lags)
        y = x[rows, t - first, 0] + x[rows, t - other, 0]
    else:
        raise ValueError(task)
    return torch.tensor(np.concatenate([x, start], -1), dtype=torch.float32), torch.tensor(y, dtype=torch.float32)


def train_eval(config, seed, size):
    import numpy as np
    import torch

    from experiments.expressiveness.memory_model import MemoryModel

    torch.set_num_threads(1)
    start = time.time()
    rng = np.random.default_rng(seed)
    x_eval, y_eval = memory_batch(config["task"], config["lags"], size["eval"], LENGTH,
                                  np.random.default_rng(10**6 + seed))
    model = MemoryModel(x_eval.size(-1), WIDTH, config["heads"], config["layers"], "learned", config["dot_product"],
                        True, LENGTH, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, size["steps"])
    for _ in range(size["steps"]):
        x, y = memory_batch(config["task"], config["lags"], size["batch"], LENGTH, rng)
        loss = (model(x)[:, -1] - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
    with torch.no_grad():
        error = float((model(x_eval)[:, -1] - y_eval).pow(2).mean() / y_eval.var())
    return error, time.time() - start


def key_of(config, seed):
    c = config
    return f"{c['task']}|{c['lags']}|H={c['heads']}|L={c['layers']}|{'DP' if c['dot_product'] else 'DPF'}|{seed}"


def summarise_trained(runs, seeds):
    out = {}
    for experiment, row, config in trained_cells():
        errs = [runs[key_of(config, s)]["error"] for s in seeds if key_of(config, s) in runs]
        if errs:
            col = f"L={config['layers']}" if experiment == "nested" else f"H={config['heads']}"
            out.setdefault(experiment, {}).setdefault(row, {})[col] = {
                "mean": statistics.fmean(errs), "std": statistics.stdev(errs) if len(errs) > 1 else 0.0, "seeds": errs}
    return out


def separation(lacking, having, floor, also=()):
    """The verdict on a claim that a model without some feature fails and one with it succeeds: ``contradicted``
    where the one without reaches 0.1, ``reproduced`` where the one with it (and every error in ``also``) does
    while the one without stays at ``floor`` or above, else ``not separable by this instance``."""
    if lacking <= 0.1:
        return "contradicted"
    if having <= 0.1 and lacking >= floor and all(e <= 0.1 for e in also):
        return "reproduced"
    return "not separable by this instance"


def trained_verdicts(t):
    def m(exp, row, col):
        return t.get(exp, {}).get(row, {}).get(col, {}).get("mean")

    v = {}
    try:
        v["adaptive"] = separation(m("adaptive", "2 layers, no QK^T", "H=4"), m("adaptive", "2 layers, QK^T", "H=4"), 0.5)
        v["nested"] = separation(m("nested", "K = 2", "L=2"), m("nested", "K = 2", "L=3"), 0.3,
                                 also=(m("nested", "K = 1", "L=2"),))
        v["summax"] = separation(m("summax", "2 layers", "H=1"), m("summax", "3 layers", "H=1"), 0.3)
    except (TypeError, ValueError):
        pass
    return v


def markdown(fits, trained, verdicts, header):
    lines = [header, ""]
    if fits:
        heads = list(next(iter(next(iter(fits["rate"].values())).values())))
        lines += [f"**rate** (best fit, E = ||k - [l = T]||^2 over N = 2T lags; threshold {RATE_THRESHOLD}): "
                  f"{verdicts.get('rate')}", "", "| kind | T | " + " | ".join(f"H={h}" for h in heads) + " |",
                  "|---|---:|" + "---:|" * len(heads)]
        for kind, by_lag in fits["rate"].items():
            for lag, curve in by_lag.items():
                lines.append(f"| {kind} | {lag} | " + " | ".join(f"{curve[h]:.3g}" for h in heads) + " |")
        for name, by_kind in fits["decay"].items():
            lines += ["", f"**decay, {name}** (best fit weighted by 1/r^2 over N = {next(iter(by_kind.values()))['length']}"
                      f" lags: RMS per-lag relative error; in brackets the largest per band of lags; threshold "
                      f"{DECAY_THRESHOLD}): {verdicts.get('decay_' + name)}", "",
                      "| kind | " + " | ".join(f"H={h}" for h in heads) + " |", "|---|" + "---:|" * len(heads)]
            for kind, entry in by_kind.items():
                cells = []
                for h in heads:
                    c = entry["cells"][h]
                    bands = ", ".join(f"{b}: {e:.2g}" for b, e in c["band_max"].items())
                    cells.append(f"{c['rms']:.3g} [{bands}]" if c["rms"] is not None else "–")
                lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    for experiment, rows in trained.items():
        cols = sorted({c for r in rows.values() for c in r}, key=lambda c: int(c.split("=")[1]))
        lines += ["", f"**{experiment}** (trained, relative error, mean ± std over seeds): {verdicts.get(experiment)}",
                  "", "| model | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
        for row, cells in rows.items():
            lines.append(f"| {row} | " + " | ".join(f"{cells[c]['mean']:.3g} ± {cells[c]['std']:.1g}" if c in cells
                                                     else "" for c in cols) + " |")
    lines += ["", "Rules (fixed before the runs):"] + [f"- {k}: {r}" for k, r in RULES.items()]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--only", default="fits trained")
    add_runner_options(p)
    a = p.parse_args(argv)
    size = dict(SMOKE) if a.smoke else dict(rate_lags=RATE_LAGS, fit_heads=FIT_HEADS, restarts=RESTARTS,
                                            iters=FIT_ITERS, decay_lengths={}, steps=STEPS, batch=BATCH, eval=EVAL)
    seeds = [int(s) for s in a.seeds.split()]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    fits_path = out / "memory_claims_fits.json"
    fits = None
    if "fits" in a.only and not (a.no_train and fits_path.exists()):
        fits = run_fits(size)
        fits_path.write_text(json.dumps(fits, indent=1))
        print(f"fits done in {fits['seconds']:.0f} s", flush=True)
    elif fits_path.exists():
        fits = json.loads(fits_path.read_text())
    log_path = out / "memory_claims_runs.jsonl"
    runs = read_runs(log_path, lambda r: r["steps"] == size["steps"] and r["batch"] == size["batch"])
    if "trained" in a.only:
        todo = [(c, s) for _, _, c in trained_cells() for s in seeds if key_of(c, s) not in runs]
        todo = list({key_of(c, s): (c, s) for c, s in todo}.values())
        todo.sort(key=lambda cs: -cs[0]["heads"] * cs[0]["layers"])
        todo = [] if a.no_train else todo
        print(f"{len(todo)} models to train", flush=True)
        with open(log_path, "a") as log:
            def record(config, seed, error, seconds):
                r = {"key": key_of(config, seed), "error": error, "seconds": seconds, "steps": size["steps"],
                     "batch": size["batch"], "config": config}
                runs[r["key"]] = r
                log.write(json.dumps(r) + "\n")
                log.flush()
                print(f"  {r['key']}: {error:.4f} ({seconds:.0f} s)", flush=True)

            if a.jobs <= 1:
                for c, s in todo:
                    record(c, s, *train_eval(c, s, size))
            else:
                with ProcessPoolExecutor(a.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                    futures = {pool.submit(train_eval, c, s, size): (c, s) for c, s in todo}
                    for f in as_completed(futures):
                        record(*futures[f], *f.result())
    trained = summarise_trained(runs, seeds)
    verdicts = {**(fit_verdicts(fits, size) if fits else {}), **trained_verdicts(trained)}
    model_seconds = sum(r["seconds"] for r in runs.values())
    header = (f"Memory claims: fits {fits['seconds'] / 60 if fits else 0:.1f} min; {len(runs)} trained models "
              f"({model_seconds / 60:.1f} model-min), {size['steps']} steps of {size['batch']} sequences, seeds {seeds}; "
              f"this invocation {(time.time() - start) / 60:.1f} min wall.")
    text = markdown(fits, trained, verdicts, header)
    print(text)
    (out / "memory_claims.md").write_text(text + "\n")
    (out / "memory_claims.json").write_text(json.dumps({"rules": RULES, "verdicts": verdicts, "fits": fits,
                                                        "trained": trained, "size": size,
                                                        "model_seconds": model_seconds}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
