#!/usr/bin/env bash
# Step 4 of the WikiText-103 recipe: perplexity of a trained model with fairseq-eval-lm.
#
# The run is the one train.sh trained with the same knobs (ARCH, RPE_INIT, SEED, TOKENS_PER_SAMPLE,
# BATCH_TOKENS, PRECISION, BPE/VOCAB, SMOKE; or RUN_NAME, or CHECKPOINT). For each split (valid, test): the standard
# non-overlapping evaluation at the training length L, the sliding-window evaluation (--context-window C:
# every block of L - C scored tokens follows C tokens of context; C = 2560 for L = 3072 as in fairseq's
# adaptive-input README), fairseq's own protocol (the same window on blocks of whole lines,
# --sample-break-mode complete: how Baevski & Auli's 18.7 was measured), Press et al.'s protocol (ALiBi's:
# a sliding window with stride 1, --context-window L - 1, one scored token per window of L), and the
# extrapolation sweep: non-overlapping blocks of 2L, 4L and 6L tokens (6L: ALiBi's 512 -> 3072). With SMOKE=1
# each evaluation scores only the first lines of each split, up to SMOKE_EVAL_TOKENS tokens (it says so). Batches hold as many tokens per forward as training's
# (MAX_TOKENS, default the checkpoint's --max-tokens); a batch that runs out of memory is tried once more at
# half the size. Perplexity is per word for word-level and SentencePiece data alike: ppl = 2 ** (loss_base2 x
# tokens scored / words), words from $DATA_BIN/words.json (see eval_lm_table.py). A setting counts only if
# every token of the split was scored (fairseq-eval-lm silently skips blocks longer than a model's maximum
# length). Writes $RESULTS_DIR/eval.md and eval.json (each complete or absent). Fails if a setting at the
# training length fails; a fairseq-protocol or extrapolation setting the model cannot do is reported, not fatal.
#
# Knobs (environment variables; each is printed at start):
#   ARCH RPE_INIT SEED TOKENS_PER_SAMPLE BATCH_TOKENS SMOKE  which run, as for train.sh (defaults as there)
#   PRECISION        the run's: fp16 or fp32; empty: whichever of the two runs is there (default: empty)
#   RUN_NAME         the run's name           (default: derived from the knobs above, as train.sh does)
#   WT103_DIR        root of the recipe's files                (default: examples/wikitext103/out)
#   BPE VOCAB        which binarization, as for binarize.sh     (default: none, 32000)
#   DATA_BIN         binarized data          (default: $WT103_DIR/data-bin/wikitext-103[-spm$VOCAB])
#   SAVE_DIR         the run's checkpoints                      (default: $WT103_DIR/checkpoints/$RUN_NAME)
#   CHECKPOINT       the model            (default: $SAVE_DIR/checkpoint_best.pt, else checkpoint_last.pt)
#   RESULTS_DIR      where eval.md/eval.json go                 (default: $WT103_DIR/results/$RUN_NAME)
#   LOG_DIR          eval-$RUN_NAME.log (appended to); train-$RUN_NAME.log is read (default: $WT103_DIR/logs)
#   SPLITS           splits to evaluate                         (default: valid test)
#   CONTEXT_WINDOW   C of the sliding window; empty: L - L/6     (default: empty)
#   PROTOCOLS        rows besides the non-overlapping one: sliding, fairseq, press (Press et al.'s stride 1, one
#                    forward per scored token: the slowest)      (default: sliding fairseq press)
#   EXTRAPOLATE      factors k of the k x L sweep               (default: 1 2 4 6)
#   SMOKE_EVAL_TOKENS  with SMOKE=1: tokens of each split scored (its first lines) (default: 8192)
#   MAX_TOKENS       tokens per forward (at least one block); 0: training's --max-tokens (default: 0)
#   EVAL_PRECISION   fp32 or fp16 (GPU only)                     (default: fp32)
#   CPU              1: evaluate on CPU                  (default: 1 without a GPU (nvidia-smi), else 0)
#   DRY_RUN          1: print each fairseq-eval-lm command, evaluate nothing (default: 0)
#   TRUST_CHECKPOINT_CODE  1: load a checkpoint that needs code to load (full unpickling runs whatever the
#                    file carries; only for files from a source you trust). Default: 0, such a file is refused
#   URPE_VENV        Python environment with fairseq           (default: .venv in the repository)
# Relative paths are taken from the directory you run the script in.
#
# Example:  ARCH=transformer_lm_urpe_wiki103 bash examples/wikitext103/eval.sh
#           CHECKPOINT=adaptive_lm_wiki103.v2/model.pt DATA_BIN=... RUN_NAME=adaptive_lm_wiki103.v2 bash .../eval.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then print_help; exit 0; fi
[ $# -eq 0 ] || die "no arguments are taken (knobs are environment variables; see --help)"

SMOKE=${SMOKE:-0}
ARCH=${ARCH:-transformer_lm_urpe_wiki103}
RPE_INIT=${RPE_INIT:-$RPE_INIT_DEFAULT}
SEED=${SEED:-1}
TOKENS_PER_SAMPLE=${TOKENS_PER_SAMPLE:-$([ "$SMOKE" = 1 ] && echo 64 || echo 3072)}
BATCH_TOKENS=${BATCH_TOKENS:-$([ "$SMOKE" = 1 ] && echo 512 || echo 73728)}
if [ -z "${CPU:-}" ]; then
  CPU=1
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then CPU=0; fi
fi
PRECISION=${PRECISION:-}
RUN_NAME=${RUN_NAME:-}
BPE=${BPE:-none}
VOCAB=${VOCAB:-32000}
DATA_BIN=$(abspath "${DATA_BIN:-$(default_data_bin)}")
SAVE_DIR=${SAVE_DIR:+$(abspath "$SAVE_DIR")}
CHECKPOINT=${CHECKPOINT:+$(abspath "$CHECKPOINT")}
RESULTS_DIR=${RESULTS_DIR:+$(abspath "$RESULTS_DIR")}
LOG_DIR=$(abspath "${LOG_DIR:-$WT103_DIR/logs}")
SPLITS=${SPLITS:-valid test}
CONTEXT_WINDOW=${CONTEXT_WINDOW:-}
PROTOCOLS=${PROTOCOLS:-sliding fairseq press}
EXTRAPOLATE=${EXTRAPOLATE:-1 2 4 6}
SMOKE_EVAL_TOKENS=${SMOKE_EVAL_TOKENS:-8192}
MAX_TOKENS=${MAX_TOKENS:-0}
EVAL_PRECISION=${EVAL_PRECISION:-fp32}
DRY_RUN=${DRY_RUN:-0}
TRUST_CHECKPOINT_CODE=${TRUST_CHECKPOINT_CODE:-0}
export TRUST_CHECKPOINT_CODE
note "$SCRIPT"
show_knobs ARCH RPE_INIT SEED TOKENS_PER_SAMPLE BATCH_TOKENS PRECISION SMOKE RUN_NAME WT103_DIR BPE VOCAB DATA_BIN SAVE_DIR CHECKPOINT \
  RESULTS_DIR LOG_DIR SPLITS CONTEXT_WINDOW PROTOCOLS EXTRAPOLATE SMOKE_EVAL_TOKENS MAX_TOKENS EVAL_PRECISION CPU DRY_RUN \
  TRUST_CHECKPOINT_CODE

for knob in SEED TOKENS_PER_SAMPLE BATCH_TOKENS MAX_TOKENS VOCAB SMOKE_EVAL_TOKENS; do
  [[ ${!knob} =~ ^[0-9]+$ ]] || die "$knob must be a non-negative integer, got $knob=${!knob}"
done
[ -z "$CHECKPOINT" ] || [ -f "$CHECKPOINT" ] || [ "$DRY_RUN" = 1 ] || die "no checkpoint $CHECKPOINT (CHECKPOINT)"
if [ -n "$RUN_NAME" ] && [ -z "$CHECKPOINT" ] && [ "$DRY_RUN" != 1 ]; then
  dir=${SAVE_DIR:-$WT103_DIR/checkpoints/$RUN_NAME}
  [ -f "$dir/checkpoint_best.pt" ] || [ -f "$dir/checkpoint_last.pt" ] ||
    die "no checkpoint $dir/checkpoint_last.pt: train first (train.sh with the same knobs), or set CHECKPOINT"
fi
[ -f "$DATA_BIN/.done" ] || die "$DATA_BIN is not binarized data (no .done marker): run binarize.sh first (same BPE/VOCAB/WT103_DIR)"
case $PRECISION in '' | fp16 | fp32) ;; *) die "PRECISION must be fp16, fp32 or empty, got PRECISION=$PRECISION" ;; esac
case $EVAL_PRECISION in fp32) ;; fp16) [ "$CPU" = 0 ] || die "EVAL_PRECISION=fp16 needs a GPU (CPU=$CPU)" ;;
  *) die "EVAL_PRECISION must be fp32 or fp16, got EVAL_PRECISION=$EVAL_PRECISION" ;; esac
[[ -z $CONTEXT_WINDOW || $CONTEXT_WINDOW =~ ^[0-9]+$ ]] || die "CONTEXT_WINDOW must be empty or an integer, got $CONTEXT_WINDOW"
[[ $TRUST_CHECKPOINT_CODE =~ ^[01]$ ]] || die "TRUST_CHECKPOINT_CODE must be 0 or 1, got $TRUST_CHECKPOINT_CODE"
[[ $EXTRAPOLATE =~ ^[0-9\ ]*$ ]] || die "EXTRAPOLATE must be whole factors like '1 2 4', got EXTRAPOLATE=$EXTRAPOLATE"
find_venv

ARGS=(--arch "$ARCH" --rpe-init "$RPE_INIT" --seed "$SEED" --tokens-per-sample "$TOKENS_PER_SAMPLE" --batch-tokens "$BATCH_TOKENS" --precision "$PRECISION"
  --bpe "$BPE" --vocab "$VOCAB" --smoke "$SMOKE" --run-name "$RUN_NAME" --wt103-dir "$WT103_DIR" --data "$DATA_BIN"
  --save-dir "$SAVE_DIR" --checkpoint "$CHECKPOINT" --results-dir "$RESULTS_DIR" --log-dir "$LOG_DIR" --splits "$SPLITS"
  --protocols "$PROTOCOLS" --extrapolate "$EXTRAPOLATE" --max-tokens "$MAX_TOKENS" --smoke-eval-tokens "$SMOKE_EVAL_TOKENS")
[ -z "$CONTEXT_WINDOW" ] || ARGS+=(--context-window "$CONTEXT_WINDOW")
[ "$CPU" = 0 ] || ARGS+=(--cpu)
[ "$EVAL_PRECISION" = fp32 ] || ARGS+=(--fp16)
[ "$DRY_RUN" != 1 ] || ARGS+=(--dry-run)
exec "$BIN/python" "$RECIPES/eval_lm_table.py" "${ARGS[@]}"
