#!/usr/bin/env bash
# Wang & E's memory tasks: relative error vs heads and layers (lin- vs log-RPE, dot product vs
# dot-product-free, RPE vs URPE, depth), plain PyTorch on the plugin's attention modules.
#   QUICK   1: length 64, 300 steps, one seed (minutes); 0: length 128, 2000 steps, 3 seeds  (default: 1)
#   ONLY    experiments among: heads dpf depth urpe                   (default: all four)
#   OUT     output folder (memory_results.md, memory_results.json, memory.png)  (default: benchmark-out/memory)
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,6p' "$0"; exit 0; fi
cd "$(dirname "$0")/../.."
QUICK=${QUICK:-1} ONLY=${ONLY:-heads dpf depth urpe} OUT=${OUT:-benchmark-out/memory}
for knob in QUICK ONLY OUT; do printf '%s=%s\n' "$knob" "${!knob}"; done
VENV=$(bash scripts/env.sh)
FLAGS=(--only "$ONLY" --out "$OUT")
if [ "$QUICK" = 1 ]; then FLAGS+=(--quick); fi
exec "$VENV/bin/python" -m benchmarks.expressiveness.memory_tasks "${FLAGS[@]}"
