#!/usr/bin/env bash
# The whole WikiText-103 comparison in one command: train.sh then eval.sh for each architecture in
# ARCHS, with the same data, hyper-parameters and evaluation, ending in one results table
# ($RESULTS_DIR/baselines[-smoke].md and .json). Run prepare.sh and binarize.sh first.
#
# ARCHS defaults to fairseq's stock transformer_lm_wiki103 (Baevski & Auli: sinusoidal absolute
# positions) followed by the plugin's RPE and URPE archs of every position kind (read from the
# plugin's registry at run time): transformer_lm_{rpe,urpe,alibi,urpe_alibi,log,urpe_log,learned,
# urpe_learned,nope,urpe_nope,rope,urpe_rope}_wiki103, 13 in all; DRY_RUN=1 prints them. The
# dot-product-free (_dpf) and _ape variants run when named. An arch that fails is marked in the
# table; the others still run; the script then exits 1. Every knob of train.sh and eval.sh applies to all runs (GPUS,
# NNODES, SMOKE, ...; on several nodes, run this same command on each node with its NODE_RANK), except
# RUN_NAME, SAVE_DIR, CHECKPOINT and RESULTS_DIR, which each run derives from its arch.
#
# Knobs (environment variables; each is printed at start):
#   ARCHS        architectures to compare, space-separated   (default: from the registry, see above)
#   WT103_DIR    root of the recipe's files                   (default: examples/wikitext103/out)
#   SMOKE        1: tiny models on CPU (see train.sh)          (default: 0)
#   TABLE_DIR    where baselines[-smoke].md/.json go           (default: $WT103_DIR/results)
#   URPE_VENV    Python environment with fairseq              (default: .venv in the repository)
#   DRY_RUN      1: print the archs that would run, and stop  (default: 0)
#
# Example:  bash examples/wikitext103/run_baselines.sh
#           SMOKE=1 ARCHS="transformer_lm_wiki103 transformer_lm_urpe_wiki103" bash examples/wikitext103/run_baselines.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then print_help; exit 0; fi
[ $# -eq 0 ] || die "no arguments are taken (knobs are environment variables; see --help)"

for knob in RUN_NAME SAVE_DIR CHECKPOINT RESULTS_DIR; do
  [ -z "${!knob:-}" ] || die "$knob is derived from each arch here; unset it (it is for train.sh/eval.sh on one arch)"
done
SMOKE=${SMOKE:-0}
DRY_RUN=${DRY_RUN:-0}
TABLE_DIR=$(abspath "${TABLE_DIR:-$WT103_DIR/results}")
find_venv
if [ -z "${ARCHS:-}" ]; then
  ARCHS=$(cd "$REPO" && "$BIN/python" - <<'PY'
from fairseq_urpe.models.architectures import baseline_variants  # registers the plugin's archs too

print(" ".join(["transformer_lm_wiki103"] + [f"transformer_lm_{v}_wiki103" for v in baseline_variants()]))
PY
  )
fi
note "$SCRIPT"
show_knobs ARCHS WT103_DIR SMOKE TABLE_DIR DRY_RUN
if [ "$DRY_RUN" = 1 ]; then
  for arch in $ARCHS; do echo "would run: $arch"; done
  exit 0
fi
export WT103_DIR SMOKE URPE_VENV=${BIN%/bin}

suffix=$([ "$SMOKE" = 1 ] && echo -smoke || true)
done_archs=() failed=()
for arch in $ARCHS; do
  note "$arch: training"
  if ARCH=$arch bash "$RECIPES/train.sh"; then
    note "$arch: evaluating"
    if ARCH=$arch bash "$RECIPES/eval.sh"; then done_archs+=("$arch"); continue; fi
    failed+=("$arch (eval.sh)")
  else
    failed+=("$arch (train.sh)")
  fi
  echo "$SCRIPT: $arch failed; going on with the others" >&2
done

mkdir -p "$TABLE_DIR"
"$BIN/python" - "$TABLE_DIR/baselines$suffix" "$WT103_DIR/results" "$suffix" "$ARCHS" "${done_archs[*]:-}" <<'PY'
import json, os, sys

out, results, suffix, archs, done = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), set(sys.argv[5].split())


def ppl(report, split, kind, factor=1):
    for row in report["rows"]:
        if row["split"] == split and row["kind"] == kind and row["factor"] == factor:
            return row.get("ppl_word") if row["status"] == "ok" else None
    return None


fmt = lambda x: "n/a" if x is None else f"{x:.2f}"
rows, records, context = [], [], None
for arch in archs:
    if arch not in done:
        rows.append(f"| {arch} | failed | | | | | | |")
        records.append({"arch": arch, "status": "failed"})
        continue
    report = json.load(open(os.path.join(results, arch + suffix, "eval.json")))
    model = report["model"]
    context = next(r["context_window"] for r in report["rows"] if r["kind"] == "sliding")
    record = {"arch": arch, "status": "ok", "params": model["params"], "num_updates": model["num_updates"],
              "L": model["train_tokens_per_sample"], "valid": ppl(report, "valid", "standard"),
              "test": ppl(report, "test", "standard"), "test_sliding": ppl(report, "test", "sliding"),
              "test_2L": ppl(report, "test", "extrapolation", 2), "test_4L": ppl(report, "test", "extrapolation", 4)}
    records.append(record)
    rows.append(f"| {arch} | {record['params']:,} | {record['num_updates']} | {fmt(record['valid'])} | {fmt(record['test'])} | "
                f"{fmt(record['test_sliding'])} | {fmt(record['test_2L'])} | {fmt(record['test_4L'])} |")
header = ["| arch | parameters | updates | valid ppl | test ppl | test ppl, sliding window"
          + (f" (context {context})" if context is not None else "") + " | test ppl at 2L | test ppl at 4L |",
          "|---|---:|---:|---:|---:|---:|---:|---:|"]
table = "\n".join(header + rows) + "\n"
note = ("Perplexity per word; the first two columns at the training length L, non-overlapping blocks; "
        "details per run in results/<arch>" + suffix + "/eval.md.\n")
for path, text in ((out + ".md", table + "\n" + note), (out + ".json", json.dumps(records, indent=1) + "\n")):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
print(table)
PY
note "wrote $TABLE_DIR/baselines$suffix.md and .json"
[ ${#failed[@]} = 0 ] || die "failed: ${failed[*]}"
