"""The results table of run_baselines.sh, from each run's eval.json (written by eval.sh).

    python baselines_table.py OUT_PREFIX RESULTS_DIR RUN...     RUN = arch=run_name=ok | arch=run_name=failed

Writes OUT_PREFIX.md and OUT_PREFIX.json (each atomically) and prints the table: per run, what defines it
(arch, L, tokens per update, RPE_INIT, seed, data, precision), the attention path its training log names, its training
time (fairseq's cumulative training time, over every resume), and its perplexities per word.
"""

import json
import os
import sys

HEADER = ("| arch | L | tokens per update | RPE_INIT | seed | data | precision | attention path | parameters | updates | training time | "
          "valid ppl | test ppl | test, sliding window | test, fairseq protocol (Baevski & Auli's 18.7) | "
          "test, Press et al.'s protocol (stride 1) | test at 2L | test at 4L | test at 6L |")


def ppl(report, split, kind, factor=1):
    for row in report["rows"]:
        if row["split"] == split and row["kind"] == kind and row["factor"] == factor:
            return row.get("ppl_word") if row["status"] == "ok" else None
    return None


def fmt(x):
    return "n/a" if x is None else f"{x:.2f}"


def duration(seconds):
    if seconds is None:
        return "n/a"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:.0f} s"


def record_of(arch, run, status, results):
    if status != "ok":
        return {"arch": arch, "run": run, "status": status}
    report = json.load(open(os.path.join(results, run, "eval.json")))
    model = report["model"]
    return {"arch": arch, "run": run, "status": "ok", "L": model["train_tokens_per_sample"],
            "tokens_per_update": model["tokens_per_update"], "rpe_init": model["rpe_init"],
            "seed": model["seed"], "data_bin": model["data_bin"], "precision": model["precision"],
            "attention_path": model["attention_path"], "params": model["params"], "num_updates": model["num_updates"],
            "train_seconds": model["train_seconds"], "valid": ppl(report, "valid", "standard"),
            "test": ppl(report, "test", "standard"), "test_sliding": ppl(report, "test", "sliding"),
            "test_fairseq": ppl(report, "test", "fairseq"), "test_press": ppl(report, "test", "press"),
            "test_2L": ppl(report, "test", "extrapolation", 2), "test_4L": ppl(report, "test", "extrapolation", 4),
            "test_6L": ppl(report, "test", "extrapolation", 6)}


def row_of(r):
    if r["status"] != "ok":
        return f"| {r['arch']} | {r['status']} |" + " |" * 17
    return (f"| {r['arch']} | {r['L']} | {r['tokens_per_update']:,} | {r['rpe_init'] or '-'} | {r['seed']} | {r['data_bin']} | {r['precision']} | "
            f"{r['attention_path']} | {r['params']:,} | {r['num_updates']} | {duration(r['train_seconds'])} | "
            f"{fmt(r['valid'])} | {fmt(r['test'])} | {fmt(r['test_sliding'])} | {fmt(r['test_fairseq'])} | "
            f"{fmt(r['test_press'])} | {fmt(r['test_2L'])} | {fmt(r['test_4L'])} | {fmt(r['test_6L'])} |")


def main(out, results, *runs):
    records = [record_of(*run.split("=", 2), results) for run in runs]
    table = "\n".join([HEADER, "|---|---:|---:|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
                      + [row_of(r) for r in records]) + "\n"
    note = ("Perplexity per word. valid and test: non-overlapping blocks of the training length L; sliding window: "
            "blocks of L/6 new tokens, each after the L - L/6 tokens before it (fairseq's --context-window, "
            "--sample-break-mode none); fairseq protocol: the same window on blocks of whole lines (--sample-break-mode complete), the evaluation behind Baevski & "
            "Auli's 18.7 (at L = 3,072; at another L it is that protocol at that L); Press et al.'s protocol: ALiBi's "
            "sliding window with stride 1 (--context-window L - 1); 2L, 4L, 6L: non-overlapping blocks of 2L, 4L and "
            "6L tokens (6L: ALiBi's extrapolation from 512 to 3,072). RPE_INIT '-': the arch learns no bias "
            "from it. Training time: fairseq's cumulative training time. Details per run in results/<run>/eval.md.\n")
    for path, text in ((out + ".md", table + "\n" + note), (out + ".json", json.dumps(records, indent=1) + "\n")):
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    print(table)


if __name__ == "__main__":
    main(*sys.argv[1:])
