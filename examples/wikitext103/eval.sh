#!/usr/bin/env bash
# Step 4 of the WikiText-103 recipe: perplexity of a trained model with fairseq-eval-lm.
#
# For each split (valid, test): the standard non-overlapping evaluation at the training length L, the
# sliding-window evaluation (--context-window C: every block of L - C scored tokens follows C tokens
# of context; C = 2560 for L = 3072 as in fairseq's adaptive-input README), and the extrapolation
# sweep: non-overlapping blocks of L, 2L and 4L tokens. Perplexity is per word for word-level and
# SentencePiece data alike: ppl = 2 ** (loss_base2 x tokens scored / words), words from
# $DATA_BIN/words.json (see eval_lm_table.py). A setting counts only if every token of the split was
# scored (fairseq-eval-lm silently skips blocks longer than a model's maximum length).
# Writes $RESULTS_DIR/eval.md and eval.json (each complete or absent). Fails if a setting at the
# training length fails; an extrapolation setting the model cannot do is reported, not fatal.
#
# Knobs (environment variables; each is printed at start):
#   ARCH RUN_NAME SMOKE  which run, as for train.sh   (default: transformer_lm_urpe_wiki103, $ARCH[-smoke], 0)
#   WT103_DIR        root of the recipe's files                (default: examples/wikitext103/out)
#   BPE VOCAB        which binarization, as for binarize.sh     (default: none, 32000)
#   DATA_BIN         binarized data          (default: $WT103_DIR/data-bin/wikitext-103[-spm$VOCAB])
#   SAVE_DIR         the run's checkpoints                      (default: $WT103_DIR/checkpoints/$RUN_NAME)
#   CHECKPOINT       the model            (default: $SAVE_DIR/checkpoint_best.pt, else checkpoint_last.pt)
#   RESULTS_DIR      where eval.md/eval.json go                 (default: $WT103_DIR/results/$RUN_NAME)
#   LOG_DIR          eval-$RUN_NAME.log (appended to)           (default: $WT103_DIR/logs)
#   SPLITS           splits to evaluate                         (default: valid test)
#   TOKENS_PER_SAMPLE  L; 0: the checkpoint's training length    (default: 0)
#   CONTEXT_WINDOW   C of the sliding window; empty: L - L/6     (default: empty)
#   EXTRAPOLATE      factors k of the k x L sweep               (default: 1 2 4)
#   MAX_TOKENS       tokens per batch (at least one block); 0: 4L (default: 0)
#   PRECISION        fp32 or fp16 (GPU only)                     (default: fp32)
#   CPU              1: evaluate on CPU                  (default: 1 without a GPU (nvidia-smi), else 0)
#   URPE_VENV        Python environment with fairseq           (default: .venv in the repository)
# Relative paths are taken from the directory you run the script in.
#
# Example:  ARCH=transformer_lm_urpe_wiki103 bash examples/wikitext103/eval.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then print_help; exit 0; fi
[ $# -eq 0 ] || die "no arguments are taken (knobs are environment variables; see --help)"

SMOKE=${SMOKE:-0}
ARCH=${ARCH:-transformer_lm_urpe_wiki103}
RUN_NAME=${RUN_NAME:-$ARCH$([ "$SMOKE" = 1 ] && echo -smoke)}
BPE=${BPE:-none}
VOCAB=${VOCAB:-32000}
DATA_BIN=$(abspath "${DATA_BIN:-$(default_data_bin)}")
SAVE_DIR=$(abspath "${SAVE_DIR:-$WT103_DIR/checkpoints/$RUN_NAME}")
if [ -z "${CHECKPOINT:-}" ]; then
  CHECKPOINT=$SAVE_DIR/checkpoint_best.pt
  [ -f "$CHECKPOINT" ] || CHECKPOINT=$SAVE_DIR/checkpoint_last.pt
fi
CHECKPOINT=$(abspath "$CHECKPOINT")
RESULTS_DIR=$(abspath "${RESULTS_DIR:-$WT103_DIR/results/$RUN_NAME}")
LOG_DIR=$(abspath "${LOG_DIR:-$WT103_DIR/logs}")
SPLITS=${SPLITS:-valid test}
TOKENS_PER_SAMPLE=${TOKENS_PER_SAMPLE:-0}
CONTEXT_WINDOW=${CONTEXT_WINDOW:-}
EXTRAPOLATE=${EXTRAPOLATE:-1 2 4}
MAX_TOKENS=${MAX_TOKENS:-0}
PRECISION=${PRECISION:-fp32}
if [ -z "${CPU:-}" ]; then
  CPU=1
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then CPU=0; fi
fi
note "$SCRIPT"
show_knobs ARCH RUN_NAME SMOKE WT103_DIR BPE VOCAB DATA_BIN SAVE_DIR CHECKPOINT RESULTS_DIR LOG_DIR SPLITS \
  TOKENS_PER_SAMPLE CONTEXT_WINDOW EXTRAPOLATE MAX_TOKENS PRECISION CPU

[ -f "$CHECKPOINT" ] || die "no checkpoint $CHECKPOINT: train first (train.sh with the same ARCH/RUN_NAME/WT103_DIR), or set CHECKPOINT"
[ -f "$DATA_BIN/.done" ] || die "$DATA_BIN is not binarized data (no .done marker): run binarize.sh first (same BPE/VOCAB/WT103_DIR)"
for split in $SPLITS; do
  [ -f "$DATA_BIN/$split.bin" ] || die "no split '$split' in $DATA_BIN (SPLITS=$SPLITS)"
done
case $PRECISION in fp32) ;; fp16) [ "$CPU" = 0 ] || die "PRECISION=fp16 needs a GPU (CPU=$CPU)" ;;
  *) die "PRECISION must be fp32 or fp16, got PRECISION=$PRECISION" ;; esac
for knob in TOKENS_PER_SAMPLE MAX_TOKENS; do
  [[ ${!knob} =~ ^[0-9]+$ ]] || die "$knob must be a non-negative integer, got $knob=${!knob}"
done
[[ -z $CONTEXT_WINDOW || $CONTEXT_WINDOW =~ ^[0-9]+$ ]] || die "CONTEXT_WINDOW must be empty or an integer, got $CONTEXT_WINDOW"
[[ $EXTRAPOLATE =~ ^[0-9\ ]*$ ]] || die "EXTRAPOLATE must be whole factors like '1 2 4', got EXTRAPOLATE=$EXTRAPOLATE"
find_venv

ARGS=(--data "$DATA_BIN" --checkpoint "$CHECKPOINT" --out-dir "$RESULTS_DIR" --user-dir "$REPO/fairseq_urpe"
  --run "$RUN_NAME" --splits "$SPLITS" --tokens-per-sample "$TOKENS_PER_SAMPLE" --extrapolate "$EXTRAPOLATE"
  --max-tokens "$MAX_TOKENS")
[ -z "$CONTEXT_WINDOW" ] || ARGS+=(--context-window "$CONTEXT_WINDOW")
[ "$CPU" = 0 ] || ARGS+=(--cpu)
[ "$PRECISION" = fp32 ] || ARGS+=(--fp16)
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/eval-$RUN_NAME.log
echo "== $SCRIPT $(date -u +%FT%TZ): $CHECKPOINT" >>"$LOG"
status=0
"$BIN/python" "$RECIPES/eval_lm_table.py" "${ARGS[@]}" 2>&1 | tee -a "$LOG" || status=$?
[ "$status" = 0 ] || die "evaluation failed (exit code $status); log: $LOG"
note "wrote $RESULTS_DIR/eval.md and eval.json"
