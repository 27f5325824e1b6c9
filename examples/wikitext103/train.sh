#!/usr/bin/env bash
# Step 3 of the WikiText-103 recipe: train one architecture with fairseq-train.
#
# One hyper-parameter set for every architecture, fairseq's adaptive-input recipe for WikiText-103
# (Baevski & Auli, ICLR 2019; fairseq examples/language_model/README.adaptive_inputs.md): NAG, lr 1.0,
# cosine schedule with 16k warm-up updates, 286k updates, clip-norm 0.1, adaptive loss, blocks of 3072
# tokens, and 3072 x 3 x 8 = 73,728 tokens per update (max-tokens 3072, update-freq 3 on 8 GPUs).
# The tokens per update stay fixed: --update-freq = BATCH_TOKENS / (MAX_TOKENS x total GPUs). The tokens per
# update fairseq parses from the whole command (EXTRA_ARGS and UPDATE_FREQ included) must be BATCH_TOKENS:
# a GPU count, UPDATE_FREQ or EXTRA_ARGS that gives another batch is refused, saying what keeps it (a
# MAX_TOKENS, or a GPU count). BATCH_TOKENS is the one knob that asks for another batch; the run's name
# carries it.
#
# A run is named by what defines it: <ARCH>-L<TOKENS_PER_SAMPLE>-batch<BATCH_TOKENS>[-init_<RPE_INIT>]-seed<SEED>-
# <words|spm<VOCAB>>-<PRECISION>[-smoke] (init only for archs that learn their bias from it). Rerunning the same
# command resumes from $SAVE_DIR/checkpoint_last.pt (made the newest intact checkpoint first, by the update
# count stored in each); it exits 0 without touching a run whose checkpoint_last.pt is at MAX_UPDATE already,
# and refuses a saved run whose settings (arch and model, L, data, tokens per update, optimizer and lr
# schedule, seed, precision) differ, naming each difference; the number of GPUs, nodes or CPU processes may
# change where the tokens per update stay. One training per run folder and node: a lock file
# ($SAVE_DIR/train.lock; pid, host, start time) refuses a second launch, naming the first (a stale lock, of a
# process gone from this host, is replaced). Before anything starts, the whole command goes through
# fairseq-train's own parser, and the disk under SAVE_DIR is checked for room for the run's checkpoints.
# SIGTERM to train.sh stops torchrun (or the CPU ranks) and every rank before it exits.
#
# Devices: GPUs per node (GPUS, found with nvidia-smi) over NNODES machines through torchrun; run the
# same command on every node with its NODE_RANK and node 0's MASTER_ADDR, with WT103_DIR on a file system all
# nodes share (SLURM: slurm_train.sbatch). CPU_PROCS=N instead trains with N CPU processes on this machine (gloo;
# explicit ranks, since fairseq ignores torchrun with --cpu). SMOKE=1: a tiny model (2 layers, width 64, adaptive
# input/softmax cut at 1/4 and 1/2 of the vocabulary, no dropout) on 64-token blocks, 256 tokens per batch, 512
# per update, 40 updates; on CPU when there is no GPU. One Python process (fairseq imported once) checks and,
# on one device, trains.
#
# Knobs (environment variables; each is printed at start):
#   ARCH             --arch                                   (default: transformer_lm_urpe_wiki103)
#   RPE_INIT         start of a learned relative bias b (--rpe-init; the t5 and learned kinds, e.g. the rpe/urpe
#                    archs): alibi, ALiBi's line -m_h|k| (the plugin's default), or zero, flat, the start
#                    without a locality prior, as in the URPE paper's models (see the README); the recipes'
#                    one default, common.sh's RPE_INIT_DEFAULT                          (default: zero)
#   ATTENTION_IMPL   --urpe-attention-impl of the plugin's archs: auto, dense, or fused (GPUs: the Triton
#                    kernel or an error at the first step, never a silent fallback)    (default: auto)
#   SMOKE            1: the tiny model above, on CPU without a GPU (default: 0)
#   WT103_DIR        root of the recipe's files                (default: examples/wikitext103/out)
#   BPE VOCAB        which binarization to read, as for binarize.sh (default: none, 32000)
#   DATA_BIN         binarized data          (default: $WT103_DIR/data-bin/wikitext-103[-spm$VOCAB])
#   RUN_NAME         names the run's folders                   (default: derived from the settings, above)
#   SAVE_DIR         checkpoints                               (default: $WT103_DIR/checkpoints/$RUN_NAME)
#   LOG_DIR          train-$RUN_NAME.log, node R > 0: train-$RUN_NAME.nodeR.log (appended to) (default: $WT103_DIR/logs)
#   TENSORBOARD_DIR  --tensorboard-logdir                      (default: $WT103_DIR/tensorboard/$RUN_NAME)
#   GPUS             GPUs per node                             (default: as nvidia-smi lists; 0 without it)
#   NNODES NODE_RANK MASTER_ADDR MASTER_PORT  torchrun's rendezvous (default: 1 0 127.0.0.1 29500; with
#                    NNODES > 1, MASTER_ADDR must be node 0's address, not a loopback one)
#   CPU_PROCS        train on CPU with this many processes, 0: on GPUs   (default: 0; 1 with SMOKE=1 and no GPU)
#   PRECISION        fp16 or fp32 (CPU: fp32 only). bf16 is refused: fairseq 0.12.3.1 turns --bf16 into
#                    --tpu, and its --amp autocasts to float16 only   (default: fp16 on GPUs, fp32 on CPU)
#   TOKENS_PER_SAMPLE  training block length L                 (default: 3072; SMOKE: 64)
#   MAX_TOKENS       tokens per GPU per batch                  (default: 3072; SMOKE: 256)
#   BATCH_TOKENS     tokens per update, kept whatever the GPU count; another value is another run (its name
#                    says batch<N>), the one way to train off the reference batch (default: 73728; SMOKE: 512)
#   UPDATE_FREQ      --update-freq instead of the derived one; must still make BATCH_TOKENS (default: derived)
#   MAX_UPDATE WARMUP_UPDATES LR LR_PERIOD_UPDATES  schedule (default: 286000 16000 1.0 MAX_UPDATE-WARMUP_UPDATES;
#                                                             SMOKE: 40 10 1.0 30)
#   SEED             --seed                                    (default: 1)
#   SAVE_INTERVAL_UPDATES KEEP_INTERVAL_UPDATES  checkpoint_<epoch>_<updates>.pt every N updates, keep K
#                                                              (default: 2000 2; SMOKE: 20 2)
#   LOG_INTERVAL NUM_WORKERS  --log-interval, --num-workers    (default: 100 2; SMOKE: 5 0)
#   EXTRA_ARGS       appended to fairseq-train's arguments, split on spaces (default: none)
#   DRY_RUN          1: check everything, print the launch command, write nothing (default: 0)
#   CHECK_COMMAND_FILE  with DRY_RUN=1: write the Python side's command line (NUL-separated) to this file instead
#                    of running it, for run_baselines.sh to check every run of a sweep in one process (default: none)
#   URPE_VENV        Python environment with fairseq           (default: .venv in the repository)
# Relative paths are taken from the directory you run the script in.
#
# Examples:  ARCH=transformer_lm_urpe_wiki103 bash examples/wikitext103/train.sh             # all local GPUs
#            GPUS=8 NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 BATCH_TOKENS=98304 bash .../train.sh  # see README
#            SMOKE=1 CPU_PROCS=2 bash examples/wikitext103/train.sh                           # CPU check
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then print_help; exit 0; fi
[ $# -eq 0 ] || die "no arguments are taken (knobs are environment variables; see --help)"

SMOKE=${SMOKE:-0}
smoke() { if [ "$SMOKE" = 1 ]; then echo "$1"; else echo "$2"; fi; }  # smoke SMOKE_VALUE FULL_VALUE
ARCH=${ARCH:-transformer_lm_urpe_wiki103}
RPE_INIT=${RPE_INIT:-$RPE_INIT_DEFAULT}
ATTENTION_IMPL=${ATTENTION_IMPL:-auto}
BPE=${BPE:-none}
VOCAB=${VOCAB:-32000}
DATA_BIN=$(abspath "${DATA_BIN:-$(default_data_bin)}")
RUN_NAME=${RUN_NAME:-}
SAVE_DIR=${SAVE_DIR:+$(abspath "$SAVE_DIR")}
LOG_DIR=$(abspath "${LOG_DIR:-$WT103_DIR/logs}")
TENSORBOARD_DIR=${TENSORBOARD_DIR:+$(abspath "$TENSORBOARD_DIR")}
if [ -z "${GPUS:-}" ]; then
  GPUS=0
  if command -v nvidia-smi >/dev/null 2>&1; then GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
  if [ -n "${CUDA_VISIBLE_DEVICES+x}" ] && [ "$GPUS" -gt 0 ]; then
    GPUS=$(awk -F, '{print ($0 == "" ? 0 : NF)}' <<<"$CUDA_VISIBLE_DEVICES")
  fi
fi
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-$([ "$NNODES" = 1 ] && echo 127.0.0.1 || true)}
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
LR_PERIOD_GIVEN=${LR_PERIOD_UPDATES:+1}
LR_PERIOD_UPDATES=${LR_PERIOD_UPDATES:-$((MAX_UPDATE - WARMUP_UPDATES))}
SEED=${SEED:-1}
SAVE_INTERVAL_UPDATES=${SAVE_INTERVAL_UPDATES:-$(smoke 20 2000)}
KEEP_INTERVAL_UPDATES=${KEEP_INTERVAL_UPDATES:-2}
LOG_INTERVAL=${LOG_INTERVAL:-$(smoke 5 100)}
NUM_WORKERS=${NUM_WORKERS:-$(smoke 0 2)}
EXTRA_ARGS=${EXTRA_ARGS:-}
DRY_RUN=${DRY_RUN:-0}
CHECK_COMMAND_FILE=${CHECK_COMMAND_FILE:-}
note "$SCRIPT"
show_knobs ARCH RPE_INIT ATTENTION_IMPL SMOKE WT103_DIR BPE VOCAB DATA_BIN RUN_NAME SAVE_DIR LOG_DIR TENSORBOARD_DIR GPUS \
  NNODES NODE_RANK MASTER_ADDR MASTER_PORT CPU_PROCS PRECISION TOKENS_PER_SAMPLE MAX_TOKENS BATCH_TOKENS UPDATE_FREQ \
  MAX_UPDATE WARMUP_UPDATES LR LR_PERIOD_UPDATES SEED SAVE_INTERVAL_UPDATES KEEP_INTERVAL_UPDATES LOG_INTERVAL NUM_WORKERS \
  EXTRA_ARGS DRY_RUN CHECK_COMMAND_FILE

# ---- checks, before anything is written
if [ -z "$LR_PERIOD_GIVEN" ] && [[ $MAX_UPDATE =~ ^[0-9]+$ && $WARMUP_UPDATES =~ ^[0-9]+$ ]] && [ "$MAX_UPDATE" -le "$WARMUP_UPDATES" ]; then
  die "LR_PERIOD_UPDATES defaults to MAX_UPDATE - WARMUP_UPDATES = $MAX_UPDATE - $WARMUP_UPDATES = $LR_PERIOD_UPDATES," \
    "the cosine period after warm-up, which must be positive. For the first MAX_UPDATE=$MAX_UPDATE updates of the full" \
    "schedule set LR_PERIOD_UPDATES=270000 (its period; the run then resumes into the full one); else set WARMUP_UPDATES" \
    "below MAX_UPDATE."
fi
for knob in GPUS NNODES NODE_RANK CPU_PROCS TOKENS_PER_SAMPLE MAX_TOKENS BATCH_TOKENS MAX_UPDATE WARMUP_UPDATES \
  LR_PERIOD_UPDATES SEED SAVE_INTERVAL_UPDATES KEEP_INTERVAL_UPDATES LOG_INTERVAL NUM_WORKERS; do
  [[ ${!knob} =~ ^[0-9]+$ ]] || die "$knob must be a non-negative integer, got $knob=${!knob}"
done
[[ $ARCH =~ ^[A-Za-z0-9_]+$ ]] || die "ARCH must be an architecture name, got ARCH=$ARCH"
[[ -z $RUN_NAME || $RUN_NAME =~ ^[A-Za-z0-9_.=-]+$ ]] || die "RUN_NAME must be a folder name, got RUN_NAME=$RUN_NAME"
case $PRECISION in
  fp16 | fp32) ;;
  bf16) die "PRECISION=bf16 has no GPU route in fairseq 0.12.3.1: its options.py turns --bf16 into --tpu (the trainer" \
    "then asks torch_xla for a TPU device), and --amp autocasts to float16 only (fairseq_task.py: torch.cuda.amp.autocast" \
    "without a dtype). Use PRECISION=fp16 or fp32." ;;
  *) die "PRECISION must be fp16 or fp32, got PRECISION=$PRECISION" ;;
esac
case $RPE_INIT in alibi | zero) ;; *) die "RPE_INIT must be alibi (the learned bias starts on ALiBi's line) or zero (flat), got RPE_INIT=$RPE_INIT" ;; esac
case $ATTENTION_IMPL in auto | dense | fused) ;; *) die "ATTENTION_IMPL must be auto, dense or fused, got ATTENTION_IMPL=$ATTENTION_IMPL" ;; esac
case $BPE in none | sentencepiece) ;; *) die "BPE must be none or sentencepiece, got BPE=$BPE" ;; esac
[[ $VOCAB =~ ^[0-9]+$ ]] || die "VOCAB must be an integer, got VOCAB=$VOCAB"
if [ "$CPU_PROCS" -gt 0 ]; then
  [ "$NNODES" = 1 ] || die "CPU_PROCS trains on this machine only (NNODES=$NNODES); use GPUs for several nodes"
  [ "$PRECISION" = fp32 ] || die "PRECISION=$PRECISION needs GPUs; CPU training (CPU_PROCS=$CPU_PROCS) is fp32"
  [ "$ATTENTION_IMPL" != fused ] || die "ATTENTION_IMPL=fused needs GPUs (the fused kernel runs on CUDA); CPU training (CPU_PROCS=$CPU_PROCS) runs dense"
else
  [ "$GPUS" -gt 0 ] || die "no GPU found (nvidia-smi lists none): set GPUS=N, or CPU_PROCS=N to train on CPU (SMOKE=1 for a tiny model)"
  [ "$NODE_RANK" -lt "$NNODES" ] || die "NODE_RANK=$NODE_RANK must be below NNODES=$NNODES"
  if [ "$NNODES" -gt 1 ]; then
    [ -n "$MASTER_ADDR" ] || die "NNODES=$NNODES needs MASTER_ADDR, the address of node 0 (NODE_RANK=0) that every node can reach"
    case $MASTER_ADDR in
      127.* | localhost | localhost.* | ::1 | 0.0.0.0 | '[::1]')
        die "MASTER_ADDR=$MASTER_ADDR is a loopback address: with NNODES=$NNODES every node would wait for a rendezvous on" \
          "itself. Set MASTER_ADDR to the address of node 0 (NODE_RANK=0) that every node can reach." ;;
    esac
  fi
fi
[ "$MAX_TOKENS" -gt 0 ] && [ "$TOKENS_PER_SAMPLE" -gt 0 ] || die "MAX_TOKENS and TOKENS_PER_SAMPLE must be positive"
[ $((MAX_TOKENS % TOKENS_PER_SAMPLE)) = 0 ] ||
  die "MAX_TOKENS=$MAX_TOKENS must be a multiple of TOKENS_PER_SAMPLE=$TOKENS_PER_SAMPLE (a batch holds whole blocks)"
[[ -z $UPDATE_FREQ || $UPDATE_FREQ =~ ^[1-9][0-9]*$ ]] || die "UPDATE_FREQ must be empty or a positive integer, got UPDATE_FREQ=$UPDATE_FREQ"
[ -f "$DATA_BIN/.done" ] || die "$DATA_BIN is not binarized data (no .done marker): run binarize.sh first (same BPE/VOCAB/WT103_DIR)"
[ -f "$DATA_BIN/dict.txt" ] || die "no $DATA_BIN/dict.txt"

# ---- the fairseq-train arguments (launch_training.py adds --rpe-init, --urpe-attention-impl, --save-dir,
# --tensorboard-logdir and the distributed ones)
ARGS=("$DATA_BIN" --task language_modeling --user-dir "$REPO/fairseq_urpe" --arch "$ARCH"
  --criterion adaptive_loss --optimizer nag --clip-norm 0.1
  --lr "$LR" --lr-scheduler cosine --warmup-updates "$WARMUP_UPDATES" --warmup-init-lr 1e-07
  --t-mult 2 --lr-period-updates "$LR_PERIOD_UPDATES" --lr-shrink 0.75 --min-lr 0.0001 --stop-min-lr 1e-09
  --max-update "$MAX_UPDATE" --tokens-per-sample "$TOKENS_PER_SAMPLE" --sample-break-mode none
  --max-tokens "$MAX_TOKENS" --required-batch-size-multiple 1
  --skip-invalid-size-inputs-valid-test --ddp-backend legacy_ddp --seed "$SEED" --num-workers "$NUM_WORKERS"
  --no-epoch-checkpoints --save-interval-updates "$SAVE_INTERVAL_UPDATES" --keep-interval-updates "$KEEP_INTERVAL_UPDATES"
  --log-format simple --log-interval "$LOG_INTERVAL")
vocab=$(($(wc -l <"$DATA_BIN/dict.txt") + 4))  # fairseq's dictionary: dict.txt and 4 special symbols
if [ "$SMOKE" = 1 ] || [ "$BPE" = sentencepiece ]; then
  # The _wiki103 archs cut the adaptive input and softmax at 20000,60000 words, beyond a subword vocabulary
  # (or the fixture's): cut at 1/4 and 1/2 of the dictionary instead. Every size gets these cutoffs: the sizes
  # without adaptive input keep their embedding and get the adaptive softmax that adaptive_loss needs.
  cutoff="$((vocab / 4)),$((vocab / 2))"
  ARGS+=(--adaptive-input-cutoff "$cutoff" --adaptive-softmax-cutoff "$cutoff")
  note "adaptive input and softmax cut at $cutoff (1/4 and 1/2 of the $vocab symbols of $DATA_BIN)"
fi
if [ "$SMOKE" = 1 ]; then
  # Explicit sizes: stock transformer_lm_wiki103 and the plugin's *_wiki103 archs take them alike.
  ARGS+=(--decoder-layers 2 --decoder-embed-dim 64 --decoder-ffn-embed-dim 256 --decoder-attention-heads 4
    --decoder-input-dim 64 --decoder-output-dim 64 --dropout 0 --attention-dropout 0 --activation-dropout 0
    --adaptive-softmax-dropout 0)
fi
case $PRECISION in fp16) ARGS+=(--fp16) ;; esac
[ "$CPU_PROCS" = 0 ] || ARGS+=(--cpu)
# shellcheck disable=SC2206
[ -z "$EXTRA_ARGS" ] || ARGS+=($EXTRA_ARGS)

find_venv
LAUNCH=("$RECIPES/launch_training.py" --bin "$BIN" --rpe-init "$RPE_INIT" \
  --attention-impl "$ATTENTION_IMPL" --run-name "$RUN_NAME" --save-dir "$SAVE_DIR" --tensorboard-dir "$TENSORBOARD_DIR" \
  --wt103-dir "$WT103_DIR" --log-dir "$LOG_DIR" --bpe "$BPE" --vocab "$VOCAB" --smoke "$SMOKE" --dry-run "$DRY_RUN" \
  --cpu-procs "$CPU_PROCS" --gpus "$GPUS" --nnodes "$NNODES" --node-rank "$NODE_RANK" --master-addr "$MASTER_ADDR" \
  --master-port "$MASTER_PORT" --batch-tokens "$BATCH_TOKENS" --reference-batch-tokens "$(smoke 512 73728)" \
  --update-freq "$UPDATE_FREQ" -- "${ARGS[@]}")
if [ -n "$CHECK_COMMAND_FILE" ]; then
  [ "$DRY_RUN" = 1 ] || die "CHECK_COMMAND_FILE is for checks: it needs DRY_RUN=1"
  printf '%s\0' "${LAUNCH[@]}" >"$CHECK_COMMAND_FILE"
  exit 0
fi
exec "$BIN/python" "${LAUNCH[@]}"
