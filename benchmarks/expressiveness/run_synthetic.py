"""Train every model of the URPE paper's synthetic table through ``fairseq-train`` and print it.

    python -m benchmarks.expressiveness.run_synthetic --size cpu        # (run_synthetic.sh sets the knobs)

For every task (ETP, PI) x model (RPE, URPE, APE, NoPE): ``fairseq-train --task position_synthetic
--arch relative_encoder_<model>_<size> --criterion token_accuracy`` with JSON logs, at most ``--jobs``
at once (each single-threaded). Writes ``<out>/results.md`` (final valid accuracy beside the paper's),
``<out>/results.json``, ``<out>/curves.png`` (valid accuracy vs updates) and the logs.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODELS = ("rpe", "urpe", "ape", "nope")
TASKS = ("etp", "pi")
COLORS = {"rpe": "tab:green", "urpe": "tab:red", "ape": "tab:blue", "nope": "tab:orange"}  # same in every plot
# Luo et al. (NeurIPS 2022), section 5.1 / Table 1, as stated in the paper's text: URPE reaches 100% on
# both tasks and RPE does not; APE solves them (absolute positions); NoPE cannot (permutation-equivariant).
PAPER = {
    ("etp", "urpe"): "100", ("pi", "urpe"): "100",
    ("etp", "rpe"): "< 100 (fails)", ("pi", "rpe"): "< 100 (fails)",
    ("etp", "ape"): "-", ("pi", "ape"): "-", ("etp", "nope"): "-", ("pi", "nope"): "-",
}
PRESETS = {  # the paper's setup, and the CPU-size one of docs/expressiveness.md
    "paper": dict(vocab=1000, seq_len=128, batch=128, lr=7e-5, warmup=6000, max_update=40000, valid_every=2000),
    "cpu": dict(vocab=64, seq_len=32, batch=32, lr=2e-3, warmup=100, max_update=1000, valid_every=200),
}


def train_command(out, task, model, size, a):
    log = out / "logs" / f"{task}_{model}.log"
    cmd = [
        str(Path(sys.executable).parent / "fairseq-train"), "--user-dir", str(REPO / "fairseq_urpe"),
        "--task", "position_synthetic", "--synthetic-task", task, "--vocab-size", a.vocab, "--seq-len", a.seq_len,
        "--train-size", a.batch * a.max_update, "--valid-size", a.valid_size, "--data-seed", a.seed,
        "--arch", f"relative_encoder_{model}_{size}", "--criterion", "token_accuracy",
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", a.lr, "--clip-norm", "1.0",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", a.warmup, "--warmup-init-lr", "1e-07",
        "--batch-size", a.batch, "--batch-size-valid", 256, "--max-update", a.max_update, "--seed", a.seed,
        "--validate-interval-updates", a.valid_every, "--num-workers", 0, "--no-save",
        "--log-format", "json", "--log-interval", max(1, a.valid_every // 5), "--no-progress-bar",
        *a.extra.split(),
    ]
    cmd += ["--distributed-world-size", "1"] if a.gpu else ["--cpu"]  # one GPU per run: the batch is what it says
    return [str(c) for c in cmd], log


def run_one(job):
    cmd, log = job
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONUNBUFFERED="1")
    start = time.time()
    with open(log, "w") as handle:
        handle.write(" ".join(cmd) + "\n")
        handle.flush()
        code = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=REPO).returncode
    return code, time.time() - start


def parse_log(log):
    """``{"valid": [(updates, accuracy)], "train": [(updates, accuracy)]}`` from a JSON-format log."""
    curves = {"valid": [], "train": []}
    for line in Path(log).read_text().splitlines():
        for tag, key in (("| valid |", "valid"), ("| train_inner |", "train")):
            if tag in line and "{" in line:
                record = json.loads(line[line.index("{"):])
                prefix = "valid_" if key == "valid" else ""
                updates = record.get(f"{prefix}num_updates")
                accuracy = record.get(f"{prefix}accuracy")
                if updates is not None and accuracy is not None:
                    curves[key].append((int(updates), float(accuracy)))
    return curves


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({t for t, _ in results}, key=TASKS.index)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for (t, model), r in sorted(results.items()):
            if t != task:
                continue
            color = COLORS.get(model)
            if r["curves"]["train"]:
                xs, ys = zip(*r["curves"]["train"])
                ax.plot(xs, ys, alpha=0.35, linewidth=1, color=color)
            if r["curves"]["valid"]:
                xs, ys = zip(*r["curves"]["valid"])
                ax.plot(xs, ys, marker="o", color=color, label=f"{model} (valid)")
        ax.set_title(f"{task.upper()}: token accuracy (faint: train)")
        ax.set_xlabel("updates")
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 101)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(PRESETS), default="cpu", help="arch size and training preset")
    p.add_argument("--tasks", default=" ".join(TASKS))
    p.add_argument("--models", default=" ".join(MODELS))
    for name in ("vocab", "seq_len", "batch", "warmup", "max_update", "valid_every"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--valid-size", type=int, default=512)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2, help="trainings at once")
    p.add_argument("--gpu", action="store_true", help="train on the GPU (default: --cpu)")
    p.add_argument("--extra", default="", help="more fairseq-train flags for every run")
    p.add_argument("--out", default="benchmark-out/synthetic")
    a = p.parse_args(argv)
    for key, value in PRESETS[a.size].items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    out = Path(a.out).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    print(" ".join(f"{k}={v}" for k, v in vars(a).items()), flush=True)

    keys = [(t, m) for t in a.tasks.split() for m in a.models.split()]
    jobs = {k: train_command(out, *k, a.size, a) for k in keys}
    start = time.time()
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = {k: pool.submit(run_one, job) for k, job in jobs.items()}
        done = {}
        for k, f in futures.items():
            done[k] = f.result()
            print(f"  {k[0]} {k[1]}: exit {done[k][0]}, {done[k][1]:.0f} s", flush=True)
    wall = time.time() - start

    results = {}
    for k in keys:
        curves = parse_log(jobs[k][1])
        final = curves["valid"][-1][1] if curves["valid"] else float("nan")
        best = max((acc for _, acc in curves["valid"]), default=float("nan"))
        results[k] = {"exit": done[k][0], "seconds": done[k][1], "final": final, "best": best, "curves": curves}

    lines = [f"size {a.size}: vocab {a.vocab}, length {a.seq_len}, batch {a.batch}, lr {a.lr}, warmup {a.warmup}, "
             f"{a.max_update} updates, seed {a.seed}; {wall / 60:.1f} min wall for {len(keys)} runs, {a.jobs} at once",
             "", "| task | model | valid accuracy % (final) | best | paper | train s |", "|---|---|---:|---:|---|---:|"]
    for (task, model), r in results.items():
        flag = "" if r["exit"] == 0 else f" (exit {r['exit']})"
        lines.append(f"| {task.upper()} | {model.upper()} | {r['final']:.2f}{flag} | {r['best']:.2f} | "
                     f"{PAPER[(task, model)]} | {r['seconds']:.0f} |")
    table = "\n".join(lines)
    print(table)
    (out / "results.md").write_text(table + "\n")
    (out / "results.json").write_text(json.dumps({f"{t}/{m}": r for (t, m), r in results.items()}, indent=1))
    plot(results, out / "curves.png")
    print(f"wrote {out / 'results.md'} and {out / 'curves.png'}")
    return 0 if all(r["exit"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
