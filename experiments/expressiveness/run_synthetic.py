"""Train every model of the URPE paper's synthetic table through ``fairseq-train``, over seeds, and print it.

    python -m experiments.expressiveness.run_synthetic --size cpu --seeds "1 2 3"   # (run_synthetic.sh sets the knobs)

For every task (ETP, PI) x model (RPE, URPE, APE, NoPE) x seed: ``fairseq-train --task position_synthetic
--arch relative_encoder_<model>_<size> --criterion token_accuracy`` with JSON logs, at most ``--jobs`` at
once (each single-threaded). The seed sets both the data and the initialisation. With ``--patience N`` a
run stops once its valid accuracy has not reached a new best for N validations (fairseq's
``--patience``), so a long run ends where its curve has flattened. Writes ``<out>/results.md`` (final valid
accuracy, mean +- std over seeds, beside the paper's), ``<out>/results.json``, ``<out>/curves.png`` (valid
accuracy vs updates: every seed faint, the mean bold) and the logs.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from experiments.study_driver import train_side_by_side, write_tables
from experiments.sweeps import add_run_options, fill_from_preset
from fairseq_urpe.fairseq_runs import fairseq_env, json_curve, mean_std, run

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
# The authors' recipe (github.com/lsj2408/URPE, simulate_{RPE,URPE,noPE}.sh): Adam (0.9, 0.999), eps 1e-8,
# no clipping, no weight decay, lr 7e-5 with 6000 linear warm-up updates and linear decay to 0 at 40000,
# batch 32 x update-freq 4, fp16, 6400 valid sequences, the LM head untied from the embeddings for PI only.
# Their --vocab-size 1000 draws input tokens from 1000 - 20 = 980 symbols, which is our --vocab-size 980.
PAPER_OPTIM = ["--adam-betas", "(0.9, 0.999)", "--adam-eps", "1e-08", "--clip-norm", "0.0", "--weight-decay", "0.0"]
PRESETS = {
    "paper": dict(vocab=980, seq_len=128, batch=32, update_freq=4, lr=7e-5, warmup=6000, max_update=40000,
                  valid_every=2000, valid_size=6400, schedule="polynomial_decay", fp16=True),
    # CPU: the authors' optimiser at a higher lr with an open-ended inverse-sqrt decay (a run can be
    # extended, or stopped by --patience, without changing its first updates), batch 32.
    "cpu": dict(vocab=64, seq_len=32, batch=32, update_freq=1, lr=2e-3, warmup=100, max_update=1000,
                valid_every=200, valid_size=512, schedule="inverse_sqrt", fp16=False),
}


def train_command(out, task, model, seed, size, a):
    log = out / "logs" / f"{task}_{model}_s{seed}.log"
    schedule = (["--lr-scheduler", "polynomial_decay", "--total-num-update", a.max_update]
                if a.schedule == "polynomial_decay" else
                ["--lr-scheduler", "inverse_sqrt", "--warmup-init-lr", "1e-07"])
    cmd = [
        str(Path(sys.executable).parent / "fairseq-train"), "--user-dir", str(REPO / "fairseq_urpe"),
        "--task", "position_synthetic", "--synthetic-task", task, "--vocab-size", a.vocab, "--seq-len", a.seq_len,
        "--train-size", a.batch * a.update_freq * a.max_update, "--valid-size", a.valid_size, "--data-seed", seed,
        "--arch", f"relative_encoder_{model}_{size}", "--criterion", "token_accuracy",
        "--optimizer", "adam", *PAPER_OPTIM, "--lr", a.lr, *schedule, "--warmup-updates", a.warmup,
        "--batch-size", a.batch, "--update-freq", a.update_freq, "--batch-size-valid", 256,
        "--max-update", a.max_update, "--seed", seed,
        "--validate-interval-updates", a.valid_every, "--num-workers", 0, "--no-save",
        "--log-format", "json", "--log-interval", max(1, a.valid_every // 5), "--no-progress-bar",
        *a.extra.split(),
    ]
    if task == "pi":
        cmd += ["--untie-weights-roberta"]
    if a.patience:
        cmd += ["--patience", a.patience, "--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric"]
    if a.fp16 and a.gpu:
        cmd += ["--fp16"]
    cmd += ["--distributed-world-size", "1"] if a.gpu else ["--cpu"]  # one GPU per run: the batch is what it says
    return [str(c) for c in cmd], log


def run_one(cmd, log):
    result = run(cmd, log=log, env=fairseq_env(threads=int(os.environ.get("OMP_NUM_THREADS", "1"))), cwd=REPO)
    return result.returncode, result.seconds


def parse_log(log):
    """``{"valid": [(updates, accuracy)], "train": [(updates, accuracy)]}`` from a JSON-format log."""
    text = Path(log).read_text()
    return {"valid": json_curve(text, "valid", "valid_num_updates", "valid_accuracy"),
            "train": json_curve(text, "train_inner", "num_updates", "accuracy")}


def summarise(finals):
    """``(mean, sample std)`` of a list of accuracies (std 0 for one value)."""
    mean, std = mean_std(finals)
    return mean, std or 0.0


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({t for t, _ in results}, key=TASKS.index)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for (t, model), r in results.items():
            if t != task:
                continue
            color = COLORS.get(model)
            curves = [run["curves"]["valid"] for run in r["runs"].values() if run["curves"]["valid"]]
            for curve in curves:
                xs, ys = zip(*curve)
                ax.plot(xs, ys, alpha=0.3, linewidth=1, color=color)
            if curves:  # the mean over seeds, up to the shortest run
                shortest = min(len(c) for c in curves)
                xs = [curves[0][i][0] for i in range(shortest)]
                ys = [statistics.fmean(c[i][1] for c in curves) for i in range(shortest)]
                ax.plot(xs, ys, marker="o", markersize=3, color=color, label=f"{model} (mean of {len(curves)})")
        ax.set_title(f"{task.upper()}: valid token accuracy (faint: each seed)")
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
    p.add_argument("--seeds", default="1 2 3", help="seeds of data and initialisation, one run each")
    for name in ("vocab", "seq_len", "batch", "update_freq", "warmup", "max_update", "valid_every", "valid_size"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--patience", type=int, default=0, help="stop a run after this many validations without a new best")
    add_run_options(p, "benchmark-out/synthetic", "trainings at once")
    a = p.parse_args(argv)
    fill_from_preset(a, PRESETS[a.size])
    seeds = [int(s) for s in a.seeds.split()]
    out = Path(a.out).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    print(" ".join(f"{k}={v}" for k, v in vars(a).items()), flush=True)

    keys = [(t, m, s) for t in a.tasks.split() for m in a.models.split() for s in seeds]
    jobs = {k: train_command(out, *k, a.size, a) for k in keys}
    start = time.time()
    key_of = {id(job): k for k, job in jobs.items()}
    done = {}
    for job, result in train_side_by_side(run_one, jobs.values(), a.jobs, threads=True):
        k = key_of[id(job)]
        done[k] = result
        print(f"  {k[0]} {k[1]} seed {k[2]}: exit {done[k][0]}, {done[k][1]:.0f} s", flush=True)
    wall = time.time() - start

    results = {}
    for task, model, seed in keys:
        curves = parse_log(jobs[(task, model, seed)][1])
        final = curves["valid"][-1] if curves["valid"] else (0, float("nan"))
        run = {"exit": done[(task, model, seed)][0], "seconds": done[(task, model, seed)][1],
               "updates": final[0], "final": final[1], "curves": curves}
        results.setdefault((task, model), {"runs": {}})["runs"][seed] = run
    for r in results.values():
        r["mean"], r["std"] = summarise([run["final"] for run in r["runs"].values()])

    schedule = f"{a.schedule}, warm-up {a.warmup}"
    stop = f", stopped after {a.patience} validations without a new best" if a.patience else ""
    lines = [f"size {a.size}: vocab {a.vocab}, length {a.seq_len}, batch {a.batch} x {a.update_freq}, lr {a.lr} "
             f"({schedule}), at most {a.max_update} updates{stop}, valid every {a.valid_every} on {a.valid_size} "
             f"sequences, seeds {seeds}; {wall / 60:.1f} min wall for {len(keys)} runs, {a.jobs} at once",
             "", "| task | model | valid accuracy % (mean ± std) | per seed | updates | paper | train s (mean) |",
             "|---|---|---:|---|---|---|---:|"]
    for (task, model), r in results.items():
        runs = r["runs"].values()
        failed = [s for s, run in r["runs"].items() if run["exit"] != 0]
        flag = f" (exit != 0: seeds {failed})" if failed else ""
        lines.append(
            f"| {task.upper()} | {model.upper()} | {r['mean']:.2f} ± {r['std']:.2f}{flag} | "
            + " / ".join(f"{run['final']:.2f}" for run in runs) + " | "
            + " / ".join(str(run["updates"]) for run in runs)
            + f" | {PAPER[(task, model)]} | {statistics.fmean(run['seconds'] for run in runs):.0f} |")
    table = "\n".join(lines)
    print(table)
    write_tables(out, "results", table, {"settings": {k: v for k, v in vars(a).items()}, "wall_seconds": wall,
                                         "results": {f"{t}/{m}": r for (t, m), r in results.items()}})
    plot(results, out / "curves.png")
    print(f"wrote {out / 'results.md'} and {out / 'curves.png'}")
    return 0 if all(run["exit"] == 0 for r in results.values() for run in r["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
