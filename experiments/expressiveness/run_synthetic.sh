#!/usr/bin/env bash
# The URPE paper's synthetic table (ETP, PI x RPE, URPE, APE, NoPE) over seeds: trains every model through
# fairseq-train, prints final valid token accuracy (mean ± std over seeds) beside the paper's result,
# saves OUT/curves.png.
#   SIZE         cpu (vocab 64, length 32, width 64, 1000 updates) or paper (the authors' scripts: vocab 980,
#                length 128, RoBERTa-base width, 3 layers, lr 7e-5, 6k warm-up, 40k updates, batch 128)  (default: cpu)
#   TASKS        tasks to run                                    (default: etp pi)
#   MODELS       variants to train                               (default: rpe urpe ape nope)
#   SEEDS        seeds of data and initialisation, one run each  (default: 1 2 3)
#   MAX_UPDATE VOCAB SEQ_LEN BATCH LR WARMUP VALID_EVERY VALID_SIZE  override the size's preset (default: preset)
#   PATIENCE     stop a run after this many validations without a new best (0: never)  (default: 0)
#   JOBS         trainings at once, each single-threaded on CPU  (default: 2; use 1 per GPU)
#   OUT          output folder (results.md, results.json, curves.png, logs/)  (default: benchmark-out/synthetic-$SIZE)
#   EXTRA_ARGS   more fairseq-train flags for every run          (default: none)
# A GPU is used when torch sees one; otherwise --cpu.
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,16p' "$0"; exit 0; fi
cd "$(dirname "$0")/../.."
SIZE=${SIZE:-cpu} TASKS=${TASKS:-etp pi} MODELS=${MODELS:-rpe urpe ape nope} SEEDS=${SEEDS:-1 2 3} JOBS=${JOBS:-2}
PATIENCE=${PATIENCE:-0} OUT=${OUT:-benchmark-out/synthetic-$SIZE} EXTRA_ARGS=${EXTRA_ARGS:-}
for knob in SIZE TASKS MODELS SEEDS MAX_UPDATE VOCAB SEQ_LEN BATCH LR WARMUP VALID_EVERY VALID_SIZE PATIENCE JOBS OUT EXTRA_ARGS; do
  printf '%s=%s\n' "$knob" "${!knob:-(preset)}"
done
VENV=$(bash scripts/env.sh)
ARGS=(--size "$SIZE" --tasks "$TASKS" --models "$MODELS" --seeds "$SEEDS" --patience "$PATIENCE" --jobs "$JOBS"
      --out "$OUT" --extra "$EXTRA_ARGS")
for pair in max-update:MAX_UPDATE vocab:VOCAB seq-len:SEQ_LEN batch:BATCH lr:LR warmup:WARMUP valid-every:VALID_EVERY \
            valid-size:VALID_SIZE; do
  value=${pair#*:}
  if [ -n "${!value:-}" ]; then ARGS+=("--${pair%%:*}" "${!value}"); fi
done
if "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then ARGS+=(--gpu); fi
exec "$VENV/bin/python" -m experiments.expressiveness.run_synthetic "${ARGS[@]}"
