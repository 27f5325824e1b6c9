#!/usr/bin/env bash
# The WikiText-103 comparison in one command: train.sh then eval.sh for each run of a sweep, with the same
# data, hyper-parameters and evaluation, ending in one results table ($TABLE_DIR/baselines[-smoke].md and
# .json). Run prepare.sh and binarize.sh first.
#
# SWEEP=core (the default) is four runs that map onto published settings: fairseq's stock
# transformer_lm_wiki103 (Baevski & Auli), transformer_lm_alibi_wiki103 at L = 512 with 9,216 tokens per
# GPU batch (Press et al.'s WikiText-103 setting), and transformer_lm_rpe_wiki103 / transformer_lm_urpe_wiki103
# with RPE_INIT=zero (the URPE paper's flat start). SWEEP=full is stock then the RPE and URPE archs of every
# position kind of the plugin, read from its registry when the script runs (DRY_RUN=1 lists them), all
# at the recipe's L. ARCHS names the archs instead. The runs and their cost in GPU-hours (the README's
# throughput model) are printed first; then every run is checked with train.sh's DRY_RUN (fairseq's parser,
# its saved checkpoint) before any starts. A finished run is not trained again; an arch that fails is
# marked in the table, the others still run, and the script then exits 1. Every knob of train.sh and
# eval.sh applies to all runs (GPUS, NNODES, SMOKE, ...; on several nodes, run this same command on each
# node with its NODE_RANK), except RUN_NAME, SAVE_DIR, TENSORBOARD_DIR, CHECKPOINT and RESULTS_DIR, which
# each run derives.
#
# Knobs (environment variables; each is printed at start):
#   SWEEP            core or full                                (default: core)
#   ARCHS            architectures to run instead, space-separated (default: none, the sweep's)
#   RPE_INIT         --rpe-init of the archs that learn a bias from it, as for train.sh (default: zero)
#   GPU_PEAK_TFLOPS  dense fp16/bf16 peak of one GPU, for the cost estimate (default: 312, an A100;
#                    V100 125, H100 SXM 989)
#   WT103_DIR        root of the recipe's files                   (default: examples/wikitext103/out)
#   SMOKE            1: tiny models on CPU (see train.sh)          (default: 0)
#   TABLE_DIR        where baselines[-smoke].md/.json go           (default: $WT103_DIR/results)
#   URPE_VENV        Python environment with fairseq              (default: .venv in the repository)
#   DRY_RUN          1: print the runs and their cost, and stop   (default: 0)
#
# Example:  GPUS=8 bash examples/wikitext103/run_baselines.sh
#           SWEEP=full GPUS=8 bash examples/wikitext103/run_baselines.sh
#           SMOKE=1 ARCHS="transformer_lm_wiki103 transformer_lm_urpe_wiki103" bash examples/wikitext103/run_baselines.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then print_help; exit 0; fi
[ $# -eq 0 ] || die "no arguments are taken (knobs are environment variables; see --help)"

for knob in RUN_NAME SAVE_DIR TENSORBOARD_DIR CHECKPOINT RESULTS_DIR; do
  [ -z "${!knob:-}" ] || die "$knob is derived by each run here; unset it (it is for train.sh/eval.sh on one run)"
done
SWEEP=${SWEEP:-core}
ARCHS=${ARCHS:-}
RPE_INIT=${RPE_INIT:-$RPE_INIT_DEFAULT}
GPU_PEAK_TFLOPS=${GPU_PEAK_TFLOPS:-312}
SMOKE=${SMOKE:-0}
DRY_RUN=${DRY_RUN:-0}
TABLE_DIR=$(abspath "${TABLE_DIR:-$WT103_DIR/results}")
note "$SCRIPT"
show_knobs SWEEP ARCHS RPE_INIT GPU_PEAK_TFLOPS WT103_DIR SMOKE TABLE_DIR DRY_RUN
case $SWEEP in core | full) ;; *) die "SWEEP must be core or full, got SWEEP=$SWEEP" ;; esac
[[ $GPU_PEAK_TFLOPS =~ ^[0-9]+([.][0-9]+)?$ ]] || die "GPU_PEAK_TFLOPS must be a number, got GPU_PEAK_TFLOPS=$GPU_PEAK_TFLOPS"
find_venv

runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
export WT103_DIR SMOKE RPE_INIT URPE_VENV=${BIN%/bin}
# The runs and their cost; then (without DRY_RUN) every run checked as train.sh's DRY_RUN checks it, all in
# one Python process, before any starts.
"$BIN/python" "$RECIPES/sweep_runs.py" --sweep "$SWEEP" --archs "$ARCHS" --smoke "$SMOKE" --runs-file "$runs" \
  --tokens-per-sample "${TOKENS_PER_SAMPLE:-$([ "$SMOKE" = 1 ] && echo 64 || echo 3072)}" \
  --max-update "${MAX_UPDATE:-$([ "$SMOKE" = 1 ] && echo 40 || echo 286000)}" \
  --batch-tokens "${BATCH_TOKENS:-$([ "$SMOKE" = 1 ] && echo 512 || echo 73728)}" --peak-tflops "$GPU_PEAK_TFLOPS" \
  --devices "$(( ${GPUS:-0} * ${NNODES:-1} ))" $([ "$DRY_RUN" = 1 ] || echo --check)
if [ "$DRY_RUN" = 1 ]; then
  note "DRY_RUN=1: nothing checked further, nothing run"
  exit 0
fi

archs=() knobs=() names=()
while read -r arch name assignments; do
  archs+=("$arch") knobs+=("$assignments") names+=("$name")
done <"$runs"

suffix=$([ "$SMOKE" = 1 ] && echo -smoke || true)
results=() failed=()
for i in "${!archs[@]}"; do
  arch=${archs[i]} name=${names[i]}
  note "$arch: training ($name)"
  # shellcheck disable=SC2086
  if env ${knobs[i]} ARCH="$arch" RUN_NAME="$name" bash "$RECIPES/train.sh"; then
    note "$arch: evaluating"
    # shellcheck disable=SC2086
    if env ${knobs[i]} ARCH="$arch" RUN_NAME="$name" bash "$RECIPES/eval.sh"; then
      results+=("$arch=$name=ok")
      continue
    fi
    failed+=("$arch (eval.sh)") results+=("$arch=$name=failed (eval.sh)")
  else
    failed+=("$arch (train.sh)") results+=("$arch=$name=failed (train.sh)")
  fi
  echo "$SCRIPT: $arch failed; going on with the others" >&2
done

mkdir -p "$TABLE_DIR"
"$BIN/python" "$RECIPES/baselines_table.py" "$TABLE_DIR/baselines$suffix" "$WT103_DIR/results" "${results[@]}"
note "wrote $TABLE_DIR/baselines$suffix.md and .json"
[ ${#failed[@]} = 0 ] || die "failed: ${failed[*]}"
