#!/usr/bin/env bash
# The URPE paper's synthetic table (ETP, PI x RPE, URPE, APE, NoPE): trains every model through
# fairseq-train, prints final valid token accuracy beside the paper's result, saves OUT/curves.png.
#   SIZE         cpu (vocab 64, length 32, width 64, 1000 updates) or paper (vocab 1000,
#                length 128, RoBERTa-base width, lr 7e-5, 6k warm-up, 40k updates, batch 128)  (default: cpu)
#   TASKS        tasks to run                                    (default: etp pi)
#   MODELS       variants to train                               (default: rpe urpe ape nope)
#   MAX_UPDATE VOCAB SEQ_LEN BATCH LR WARMUP VALID_EVERY  override the size's preset (default: preset)
#   SEED         data and training seed                          (default: 1)
#   JOBS         trainings at once, each single-threaded on CPU  (default: 2; use 1 per GPU)
#   OUT          output folder (results.md, results.json, curves.png, logs/)  (default: benchmark-out/synthetic-$SIZE)
#   EXTRA_ARGS   more fairseq-train flags for every run          (default: none)
# A GPU is used when torch sees one; otherwise --cpu.
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,13p' "$0"; exit 0; fi
cd "$(dirname "$0")/../.."
SIZE=${SIZE:-cpu} TASKS=${TASKS:-etp pi} MODELS=${MODELS:-rpe urpe ape nope} SEED=${SEED:-1} JOBS=${JOBS:-2}
OUT=${OUT:-benchmark-out/synthetic-$SIZE} EXTRA_ARGS=${EXTRA_ARGS:-}
for knob in SIZE TASKS MODELS MAX_UPDATE VOCAB SEQ_LEN BATCH LR WARMUP VALID_EVERY SEED JOBS OUT EXTRA_ARGS; do
  printf '%s=%s\n' "$knob" "${!knob:-(preset)}"
done
VENV=$(bash scripts/env.sh)
ARGS=(--size "$SIZE" --tasks "$TASKS" --models "$MODELS" --seed "$SEED" --jobs "$JOBS" --out "$OUT" --extra "$EXTRA_ARGS")
for pair in max-update:MAX_UPDATE vocab:VOCAB seq-len:SEQ_LEN batch:BATCH lr:LR warmup:WARMUP valid-every:VALID_EVERY; do
  value=${pair#*:}
  if [ -n "${!value:-}" ]; then ARGS+=("--${pair%%:*}" "${!value}"); fi
done
if "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then ARGS+=(--gpu); fi
exec "$VENV/bin/python" -m benchmarks.expressiveness.run_synthetic "${ARGS[@]}"
