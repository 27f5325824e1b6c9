#!/usr/bin/env bash
# Step 3 of the WikiText-103 recipe: train one architecture with fairseq-train.
#
# One hyper-parameter set for every architecture, fairseq's adaptive-input recipe for WikiText-103
# (Baevski & Auli, ICLR 2019; fairseq examples/language_model/README.adaptive_inputs.md): NAG, lr 1.0,
# cosine schedule with 16k warm-up updates, 286k updates, clip-norm 0.1, adaptive loss, blocks of 3072
# tokens, and 3072 x 3 x 8 = 73,728 tokens per update (max-tokens 3072, update-freq 3 on 8 GPUs).
# The tokens per update stay fixed: --update-freq = BATCH_TOKENS / (MAX_TOKENS x total GPUs), and a GPU
# count that does not divide it is refused unless UPDATE_FREQ is given. Rerunning the same command
# resumes from $SAVE_DIR/checkpoint_last.pt (fairseq's default), after checking that file is intact.
#
# Devices: GPUs per node (GPUS, found with nvidia-smi) over NNODES machines through torchrun; run the
# same command on every node with its NODE_RANK, with WT103_DIR on a file system all nodes share. CPU_PROCS=N instead trains with N CPU processes on
# this machine (gloo; explicit ranks, since fairseq ignores torchrun with --cpu). SMOKE=1: a tiny model
# (2 layers, width 64, adaptive input/softmax cut at 1/4 and 1/2 of the vocabulary, no dropout) on 64-token
# blocks, 256 tokens per batch, 512 per update, 40 updates; on CPU when there is no GPU.
#
# Knobs (environment variables; each is printed at start):
#   ARCH             --arch                                   (default: transformer_lm_urpe_wiki103)
#   RPE_INIT         start of a learned relative bias b (--rpe-init; the t5 and learned kinds, e.g. the rpe/urpe
#                    archs): alibi, ALiBi's line -m_h|k| (the plugin's default), or zero, flat, the start
#                    without a locality prior, as in the URPE paper's models (see the README)   (default: alibi)
#   WT103_DIR        root of the recipe's files                (default: examples/wikitext103/out)
#   BPE VOCAB        which binarization to read, as for binarize.sh (default: none, 32000)
#   DATA_BIN         binarized data          (default: $WT103_DIR/data-bin/wikitext-103[-spm$VOCAB])
#   RUN_NAME         names the run's folders                   (default: $ARCH, or $ARCH-smoke)
#   SAVE_DIR         checkpoints                               (default: $WT103_DIR/checkpoints/$RUN_NAME)
#   LOG_DIR          train-$RUN_NAME.log (appended to)         (default: $WT103_DIR/logs)
#   TENSORBOARD_DIR  --tensorboard-logdir                      (default: $WT103_DIR/tensorboard/$RUN_NAME)
#   GPUS             GPUs per node                             (default: as nvidia-smi lists; 0 without it)
#   NNODES NODE_RANK MASTER_ADDR MASTER_PORT  torchrun's rendezvous (default: 1 0 127.0.0.1 29500)
#   CPU_PROCS        train on CPU with this many processes, 0: on GPUs   (default: 0; 1 with SMOKE=1 and no GPU)
#   PRECISION        fp16, bf16 or fp32 (CPU: fp32 only)        (default: fp16 on GPUs, fp32 on CPU)
#   TOKENS_PER_SAMPLE  training block length L                 (default: 3072; SMOKE: 64)
#   MAX_TOKENS       tokens per GPU per batch                  (default: 3072; SMOKE: 256)
#   BATCH_TOKENS     tokens per update, kept whatever the GPU count (default: 73728; SMOKE: 512)
#   UPDATE_FREQ      set to override the derived --update-freq  (default: derived)
#   MAX_UPDATE WARMUP_UPDATES LR LR_PERIOD_UPDATES  schedule (default: 286000 16000 1.0 MAX_UPDATE-WARMUP_UPDATES;
#                                                             SMOKE: 40 10 1.0 30)
#   SEED             --seed                                    (default: 1)
#   SAVE_INTERVAL_UPDATES KEEP_INTERVAL_UPDATES  checkpoint_<epoch>_<updates>.pt every N updates, keep K
#                                                              (default: 2000 2; SMOKE: 20 2)
#   LOG_INTERVAL NUM_WORKERS  --log-interval, --num-workers    (default: 100 2; SMOKE: 5 0)
#   EXTRA_ARGS       appended to fairseq-train's arguments, split on spaces (default: none)
#   DRY_RUN          1: check everything, print the launch command, do not train (default: 0)
#   URPE_VENV        Python environment with fairseq           (default: .venv in the repository)
# Relative paths are taken from the directory you run the script in.
#
# Examples:  ARCH=transformer_lm_urpe_wiki103 bash examples/wikitext103/train.sh             # all local GPUs
#            GPUS=8 NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 UPDATE_FREQ=2 bash .../train.sh     # see README
#            SMOKE=1 CPU_PROCS=2 bash examples/wikitext103/train.sh                           # CPU check
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then print_help; exit 0; fi
[ $# -eq 0 ] || die "no arguments are taken (knobs are environment variables; see --help)"

SMOKE=${SMOKE:-0}
smoke() { if [ "$SMOKE" = 1 ]; then echo "$1"; else echo "$2"; fi; }  # smoke SMOKE_VALUE FULL_VALUE
ARCH=${ARCH:-transformer_lm_urpe_wiki103}
RPE_INIT=${RPE_INIT:-alibi}
BPE=${BPE:-none}
VOCAB=${VOCAB:-32000}
DATA_BIN=$(abspath "${DATA_BIN:-$(default_data_bin)}")
RUN_NAME=${RUN_NAME:-$ARCH$(smoke -smoke "")}
SAVE_DIR=$(abspath "${SAVE_DIR:-$WT103_DIR/checkpoints/$RUN_NAME}")
LOG_DIR=$(abspath "${LOG_DIR:-$WT103_DIR/logs}")
TENSORBOARD_DIR=$(abspath "${TENSORBOARD_DIR:-$WT103_DIR/tensorboard/$RUN_NAME}")
if [ -z "${GPUS:-}" ]; then
  GPUS=0
  if command -v nvidia-smi >/dev/null 2>&1; then GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
  if [ -n "${CUDA_VISIBLE_DEVICES+x}" ] && [ "$GPUS" -gt 0 ]; then
    GPUS=$(awk -F, '{print ($0 == "" ? 0 : NF)}' <<<"$CUDA_VISIBLE_DEVICES")
  fi
fi
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
CPU_PROCS=${CPU_PROCS:-0}
if [ "$CPU_PROCS" = 0 ] && [ "$GPUS" = 0 ] && [ "$SMOKE" = 1 ]; then CPU_PROCS=1; fi
MASTER_PORT=${MASTER_PORT:-$([ "$CPU_PROCS" = 0 ] && echo 29500 || echo auto)}
PRECISION=${PRECISION:-$([ "$CPU_PROCS" = 0 ] && echo fp16 || echo fp32)}
TOKENS_PER_SAMPLE=${TOKENS_PER_SAMPLE:-$(smoke 64 3072)}
MAX_TOKENS=${MAX_TOKENS:-$(smoke 256 3072)}
BATCH_TOKENS=${BATCH_TOKENS:-$(smoke 512 73728)}
UPDATE_FREQ=${UPDATE_FREQ:-}
MAX_UPDATE=${MAX_UPDATE:-$(smoke 40 286000)}
WARMUP_UPDATES=${WARMUP_UPDATES:-$(smoke 10 16000)}
LR=${LR:-1.0}
LR_PERIOD_UPDATES=${LR_PERIOD_UPDATES:-$((MAX_UPDATE - WARMUP_UPDATES))}
SEED=${SEED:-1}
SAVE_INTERVAL_UPDATES=${SAVE_INTERVAL_UPDATES:-$(smoke 20 2000)}
KEEP_INTERVAL_UPDATES=${KEEP_INTERVAL_UPDATES:-2}
LOG_INTERVAL=${LOG_INTERVAL:-$(smoke 5 100)}
NUM_WORKERS=${NUM_WORKERS:-$(smoke 0 2)}
EXTRA_ARGS=${EXTRA_ARGS:-}
DRY_RUN=${DRY_RUN:-0}
note "$SCRIPT"
show_knobs ARCH RPE_INIT SMOKE WT103_DIR BPE VOCAB DATA_BIN RUN_NAME SAVE_DIR LOG_DIR TENSORBOARD_DIR GPUS NNODES NODE_RANK \
  MASTER_ADDR MASTER_PORT CPU_PROCS PRECISION TOKENS_PER_SAMPLE MAX_TOKENS BATCH_TOKENS UPDATE_FREQ MAX_UPDATE \
  WARMUP_UPDATES LR LR_PERIOD_UPDATES SEED SAVE_INTERVAL_UPDATES KEEP_INTERVAL_UPDATES LOG_INTERVAL NUM_WORKERS \
  EXTRA_ARGS DRY_RUN

# ---- checks, before anything is written
for knob in GPUS NNODES NODE_RANK CPU_PROCS TOKENS_PER_SAMPLE MAX_TOKENS BATCH_TOKENS MAX_UPDATE WARMUP_UPDATES \
  LR_PERIOD_UPDATES SEED SAVE_INTERVAL_UPDATES KEEP_INTERVAL_UPDATES LOG_INTERVAL NUM_WORKERS; do
  [[ ${!knob} =~ ^[0-9]+$ ]] || die "$knob must be a non-negative integer, got $knob=${!knob}"
done
[[ $ARCH =~ ^[A-Za-z0-9_]+$ ]] || die "ARCH must be an architecture name, got ARCH=$ARCH"
case $PRECISION in fp16 | bf16 | fp32) ;; *) die "PRECISION must be fp16, bf16 or fp32, got PRECISION=$PRECISION" ;; esac
case $RPE_INIT in alibi | zero) ;; *) die "RPE_INIT must be alibi (the learned bias starts on ALiBi's line) or zero (flat), got RPE_INIT=$RPE_INIT" ;; esac
if [ "$CPU_PROCS" -gt 0 ]; then
  [ "$NNODES" = 1 ] || die "CPU_PROCS trains on this machine only (NNODES=$NNODES); use GPUs for several nodes"
  [ "$PRECISION" = fp32 ] || die "PRECISION=$PRECISION needs GPUs; CPU training (CPU_PROCS=$CPU_PROCS) is fp32"
  WORLD=$CPU_PROCS
  DEVICE="CPU, $CPU_PROCS process(es)"
else
  [ "$GPUS" -gt 0 ] || die "no GPU found (nvidia-smi lists none): set GPUS=N, or CPU_PROCS=N to train on CPU (SMOKE=1 for a tiny model)"
  [ "$NODE_RANK" -lt "$NNODES" ] || die "NODE_RANK=$NODE_RANK must be below NNODES=$NNODES"
  WORLD=$((GPUS * NNODES))
  DEVICE="$GPUS GPU(s) x $NNODES node(s)"
fi
[ "$MAX_TOKENS" -gt 0 ] && [ "$TOKENS_PER_SAMPLE" -gt 0 ] || die "MAX_TOKENS and TOKENS_PER_SAMPLE must be positive"
[ $((MAX_TOKENS % TOKENS_PER_SAMPLE)) = 0 ] ||
  die "MAX_TOKENS=$MAX_TOKENS must be a multiple of TOKENS_PER_SAMPLE=$TOKENS_PER_SAMPLE (a batch holds whole blocks)"
if [ -z "$UPDATE_FREQ" ]; then
  per_step=$((MAX_TOKENS * WORLD))
  if [ $((BATCH_TOKENS % per_step)) != 0 ] || [ "$BATCH_TOKENS" -lt "$per_step" ]; then
    die "BATCH_TOKENS=$BATCH_TOKENS tokens per update is not a whole number of batches of MAX_TOKENS=$MAX_TOKENS on $WORLD device(s)" \
      "($per_step tokens per step). Use a device count that divides $((BATCH_TOKENS / MAX_TOKENS)), or set UPDATE_FREQ" \
      "(an effective batch of MAX_TOKENS x devices x UPDATE_FREQ tokens), or change MAX_TOKENS/BATCH_TOKENS."
  fi
  UPDATE_FREQ=$((BATCH_TOKENS / per_step))
fi
[[ $UPDATE_FREQ =~ ^[1-9][0-9]*$ ]] || die "UPDATE_FREQ must be a positive integer, got UPDATE_FREQ=$UPDATE_FREQ"
EFFECTIVE=$((MAX_TOKENS * WORLD * UPDATE_FREQ))
note "$DEVICE, --max-tokens $MAX_TOKENS --update-freq $UPDATE_FREQ: $EFFECTIVE tokens per update"
if [ "$EFFECTIVE" != "$BATCH_TOKENS" ]; then
  echo "$SCRIPT: warning: $EFFECTIVE tokens per update, not BATCH_TOKENS=$BATCH_TOKENS: results are not comparable with the reference batch" >&2
fi
[ -f "$DATA_BIN/.done" ] || die "$DATA_BIN is not binarized data (no .done marker): run binarize.sh first (same BPE/VOCAB/WT103_DIR)"
[ -f "$DATA_BIN/dict.txt" ] || die "no $DATA_BIN/dict.txt"

find_venv

# ---- where the learned bias starts: the plugin's archs take --rpe-init (it acts on the kinds with a learned
# bias b, t5 and learned); fairseq's own archs have no relative bias and no such option
BIAS=$("$BIN/python" - "$REPO" "$ARCH" <<'PY'
import argparse, sys
sys.path.insert(0, sys.argv[1])
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq_urpe.models.architectures import ARCHITECTURES

arch = ARCHITECTURES.get(sys.argv[2])
if arch is None:
    print("stock" if sys.argv[2] in ARCH_MODEL_REGISTRY else "unknown")  # fairseq's own arch, or none at all
else:
    args = argparse.Namespace()
    arch(args)  # the arch's defaults, as fairseq-train applies them
    print(("learned " if args.rpe_kind in ("t5", "learned") else "fixed ") + args.rpe_kind)
PY
) || die "could not read the position kind of ARCH=$ARCH from the plugin (see the Python error above)"
RPE_INIT_ARGS=()
case $BIAS in
  learned\ *)
    RPE_INIT_ARGS=(--rpe-init "$RPE_INIT")
    note "bias start: $ARCH (--rpe-kind ${BIAS#* }) learns its bias b, started $([ "$RPE_INIT" = alibi ] &&
      echo "on ALiBi's line -m_h|k| (RPE_INIT=alibi, --rpe-init alibi)" || echo "flat, b = 0 (RPE_INIT=zero, --rpe-init zero)")" ;;
  fixed\ *)
    RPE_INIT_ARGS=(--rpe-init "$RPE_INIT")
    note "bias start: $ARCH (--rpe-kind ${BIAS#* }) has no learned bias b; RPE_INIT=$RPE_INIT changes nothing" ;;
  stock) note "bias start: $ARCH is fairseq's own arch, without a relative bias; RPE_INIT does not apply" ;;
  unknown) ;;  # fairseq-train refuses it below, naming the archs it knows
  *) die "could not read the position kind of ARCH=$ARCH from the plugin" ;;
esac

# ---- the fairseq-train command
ARGS=("$DATA_BIN" --task language_modeling --user-dir "$REPO/fairseq_urpe" --arch "$ARCH"
  --criterion adaptive_loss --optimizer nag --clip-norm 0.1
  --lr "$LR" --lr-scheduler cosine --warmup-updates "$WARMUP_UPDATES" --warmup-init-lr 1e-07
  --t-mult 2 --lr-period-updates "$LR_PERIOD_UPDATES" --lr-shrink 0.75 --min-lr 0.0001 --stop-min-lr 1e-09
  "${RPE_INIT_ARGS[@]}" --max-update "$MAX_UPDATE" --tokens-per-sample "$TOKENS_PER_SAMPLE" --sample-break-mode none
  --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --required-batch-size-multiple 1
  --skip-invalid-size-inputs-valid-test --ddp-backend legacy_ddp --seed "$SEED" --num-workers "$NUM_WORKERS"
  --save-dir "$SAVE_DIR" --no-epoch-checkpoints --save-interval-updates "$SAVE_INTERVAL_UPDATES"
  --keep-interval-updates "$KEEP_INTERVAL_UPDATES" --tensorboard-logdir "$TENSORBOARD_DIR"
  --log-format simple --log-interval "$LOG_INTERVAL")
if [ "$SMOKE" = 1 ]; then
  # Explicit sizes: stock transformer_lm_wiki103 and the plugin's *_wiki103 archs take them alike.
  vocab=$(($(wc -l <"$DATA_BIN/dict.txt") + 4))
  cutoff="$((vocab / 4)),$((vocab / 2))"
  ARGS+=(--decoder-layers 2 --decoder-embed-dim 64 --decoder-ffn-embed-dim 256 --decoder-attention-heads 4
    --decoder-input-dim 64 --decoder-output-dim 64 --adaptive-input-cutoff "$cutoff" --adaptive-softmax-cutoff "$cutoff"
    --dropout 0 --attention-dropout 0 --activation-dropout 0 --adaptive-softmax-dropout 0)
fi
case $PRECISION in fp16) ARGS+=(--fp16) ;; bf16) ARGS+=(--bf16) ;; esac
# shellcheck disable=SC2206
[ -z "$EXTRA_ARGS" ] || ARGS+=($EXTRA_ARGS)

mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/train-$RUN_NAME.log

if [ -d "$SAVE_DIR" ] && [ "$DRY_RUN" != 1 ]; then
  "$BIN/python" "$RECIPES/checkpoint_last_intact.py" "$SAVE_DIR" || die "cannot resume from $SAVE_DIR (see above)"
fi
[ ! -f "$SAVE_DIR/checkpoint_last.pt" ] || note "resuming from $SAVE_DIR/checkpoint_last.pt"

explain_failure() {  # explain_failure LOGFILE...: name the cause of a failed fairseq-train when it is a known one
  if grep -qs "argument --arch/-a: invalid choice: '$ARCH'" "$@"; then
    local archs
    archs=$(grep -ohs "'transformer_lm[a-z0-9_]*'" "$@" | tr -d "'" | sort -u | tr '\n' ' ')
    die "unknown ARCH=$ARCH: fairseq-train (with --user-dir fairseq_urpe) has no such --arch. Language-model archs: $archs"
  fi
}

if [ "$CPU_PROCS" -gt 0 ]; then
  ARGS+=(--cpu)
  if [ "$CPU_PROCS" = 1 ]; then
    CMD=("$BIN/fairseq-train" "${ARGS[@]}")
  else
    if [ "$MASTER_PORT" = auto ]; then
      MASTER_PORT=$("$BIN/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    fi
    DIST=(--distributed-init-method "tcp://127.0.0.1:$MASTER_PORT" --distributed-world-size "$CPU_PROCS"
      --distributed-no-spawn --distributed-backend gloo)
    CMD=("$BIN/fairseq-train" "${ARGS[@]}" "${DIST[@]}" --distributed-rank '$RANK')
  fi
elif [ "$WORLD" = 1 ]; then
  CMD=("$BIN/fairseq-train" "${ARGS[@]}" --distributed-world-size 1)
else
  # --distributed-world-size too: fairseq skips torchrun's environment when its default (the local GPU count) is 1.
  CMD=("$BIN/torchrun" --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$GPUS"
    --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" -m fairseq_cli.train "${ARGS[@]}"
    --distributed-world-size "$WORLD")
fi
note "command$([ "$CPU_PROCS" -gt 1 ] && echo " (one per rank, RANK=0..$((CPU_PROCS - 1)))"):"
printf ' %q' "${CMD[@]}"
echo
if [ "$DRY_RUN" = 1 ]; then
  note "DRY_RUN=1: not training"
  exit 0
fi

echo "== $SCRIPT $(date -u +%FT%TZ): ${CMD[*]}" >>"$LOG"
if [ "$CPU_PROCS" -le 1 ]; then
  status=0
  "${CMD[@]}" 2>&1 | tee -a "$LOG" || status=$?
  [ "$status" = 0 ] || { explain_failure "$LOG"; die "fairseq-train failed (exit code $status); log: $LOG"; }
else
  # One background process per rank, rank 0 writing to $LOG (shown), rank R to train-$RUN_NAME.rankR.log.
  # If a rank fails, the others are stopped (they would wait forever for it in the next all-reduce).
  pids=() logs=("$LOG")
  stop_ranks() { local pid; for pid in "${pids[@]}" ${tailpid:-}; do [ -z "$pid" ] || kill "$pid" 2>/dev/null || true; done; }
  trap 'stop_ranks; exit 143' TERM
  trap 'stop_ranks; exit 130' INT
  tail -n 0 -f "$LOG" &
  tailpid=$!
  for ((rank = 0; rank < CPU_PROCS; rank++)); do
    if [ "$rank" -gt 0 ]; then
      logs+=("$LOG_DIR/train-$RUN_NAME.rank$rank.log")
      echo "== $SCRIPT $(date -u +%FT%TZ): rank $rank" >>"${logs[rank]}"
    fi
    "${CMD[@]/'$RANK'/$rank}" >>"${logs[rank]}" 2>&1 &
    pids+=($!)
  done
  failed=
  running=${#pids[@]}
  while [ "$running" -gt 0 ] && [ -z "$failed" ]; do
    sleep 1
    running=0
    for rank in "${!pids[@]}"; do
      pid=${pids[rank]}
      [ -n "$pid" ] || continue
      if kill -0 "$pid" 2>/dev/null; then running=$((running + 1)); continue; fi
      status=0
      wait "$pid" || status=$?
      pids[rank]=
      if [ "$status" = 0 ]; then note "rank $rank finished"; else failed="rank $rank (exit code $status; log ${logs[rank]})"; fi
    done
  done
  stop_ranks
  for pid in "${pids[@]}"; do [ -z "$pid" ] || wait "$pid" 2>/dev/null || true; done
  wait "$tailpid" 2>/dev/null || true
  if [ -n "$failed" ]; then
    explain_failure "${logs[@]}"
    die "fairseq-train failed on $failed; the other ranks were stopped"
  fi
fi
# Global rank 0 (on node 0) writes the checkpoints; the other nodes see them on the shared file system.
if [ "$NODE_RANK" = 0 ]; then
  [ -f "$SAVE_DIR/checkpoint_last.pt" ] || die "fairseq-train ended without writing $SAVE_DIR/checkpoint_last.pt"
fi
note "trained $ARCH: $SAVE_DIR/checkpoint_last.pt"
