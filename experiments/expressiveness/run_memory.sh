#!/usr/bin/env bash
# Wang & E's experiments (docs/expressiveness/wang_e_*.md): Appendix H's tables 3-6, 8, 9 at the paper's sizes,
# Proposition 4.2 with and without QK^T, and the memory claims (best fits to T = 1024, trained adaptive, nested
# and sum-vs-max memories). Plain PyTorch; each writes <name>.{md,json} and a runs file into OUT, and a rerun
# trains only what is missing there.
#   ONLY    among: appendix_h prop42 memory_claims                          (default: all three)
#   SEEDS   exactly these seeds per cell                (default: verdict_rules' batches: 0-4, more while a
#           cell has fewer than 3 live seeds)
#   JOBS    processes per experiment, one thread each                      (default: 1)
#   SMOKE   1: tiny sizes (seconds; checks every code path)                 (default: 0)
#   OUT     output folder                                                  (default: docs/expressiveness)
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,10p' "$0"; exit 0; fi
cd "$(dirname "$0")/../.."
ONLY=${ONLY:-appendix_h prop42 memory_claims} SEEDS=${SEEDS:-} JOBS=${JOBS:-1} SMOKE=${SMOKE:-0}
OUT=${OUT:-docs/expressiveness}
for knob in ONLY SEEDS JOBS SMOKE OUT; do printf '%s=%s\n' "$knob" "${!knob}"; done
VENV=$(bash scripts/env.sh)
FLAGS=(--jobs "$JOBS" --out "$OUT")
if [ -n "$SEEDS" ]; then FLAGS+=(--seeds "$SEEDS"); fi
if [ "$SMOKE" = 1 ]; then FLAGS+=(--smoke); fi
for experiment in $ONLY; do
  "$VENV/bin/python" -m "experiments.expressiveness.$experiment" "${FLAGS[@]}"
done
