#!/usr/bin/env bash
# Wang & E's memory tasks: relative error vs heads for memory lengths T (lin- vs log-RPE on fixed and
# heavy-tailed memory, with and without QK^T, 1-3 layers on nested memory), 3 seeds, with the heads needed
# for a fixed error vs T and its fitted log-log slope. Plain PyTorch on the plugin's attention modules.
#   ONLY    experiments among: rate heavy dpf depth                        (default: all four)
#   STEPS   Adam steps per model                                           (default: 600)
#   SEEDS   seeds per cell                                                 (default: 0 1 2)
#   JOBS    models trained at once, one core each                          (default: 2)
#   SMOKE   1: tiny sizes, 3 steps (seconds; checks every code path)        (default: 0)
#   OUT     output folder (memory_results.{md,json}, memory_<experiment>.png, memory_runs.jsonl; a rerun
#           into the same folder trains only the models not already there)  (default: benchmark-out/memory)
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,12p' "$0"; exit 0; fi
cd "$(dirname "$0")/../.."
ONLY=${ONLY:-rate heavy dpf depth} STEPS=${STEPS:-600} SEEDS=${SEEDS:-0 1 2} JOBS=${JOBS:-2} SMOKE=${SMOKE:-0}
OUT=${OUT:-benchmark-out/memory}
for knob in ONLY STEPS SEEDS JOBS SMOKE OUT; do printf '%s=%s\n' "$knob" "${!knob}"; done
VENV=$(bash scripts/env.sh)
FLAGS=(--only "$ONLY" --seeds "$SEEDS" --jobs "$JOBS" --out "$OUT")
if [ "$SMOKE" = 1 ]; then FLAGS+=(--smoke); else FLAGS+=(--steps "$STEPS"); fi
exec "$VENV/bin/python" -m experiments.expressiveness.memory_experiments "${FLAGS[@]}"
