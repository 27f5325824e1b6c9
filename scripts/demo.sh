#!/usr/bin/env bash
# Demo: stock transformer_lm vs transformer_lm_rpe vs transformer_lm_urpe on a slice of the Brown corpus.
# Creates the environment if needed, binarizes data/brown, trains the three tiny models with identical
# settings, evaluates each with fairseq-eval-lm and prints a perplexity table (also DEMO_DIR/results.md).
#   DEMO_DIR      output folder (data-bin, checkpoints, logs, results)       (default: demo-out)
#   MAX_UPDATE    updates per model                                          (default: 500)
#   TOKENS        --tokens-per-sample, training and evaluation length         (default: 128)
#   MAX_TOKENS    tokens per batch                                           (default: 2048)
#   LAYERS EMBED FFN HEADS  model size                                       (default: 2 64 256 4)
#   LR WARMUP     Adam learning rate, inverse-sqrt warm-up updates           (default: 0.003 200)
#   SEED          training seed                                              (default: 1)
#   ARCHS         architectures to compare              (default: transformer_lm transformer_lm_rpe transformer_lm_urpe)
# A GPU is used when torch sees one; otherwise --cpu.
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,13p' "$0"; exit 0; fi
cd "$(dirname "$0")/.."
DEMO_DIR=${DEMO_DIR:-demo-out}
MAX_UPDATE=${MAX_UPDATE:-500}
TOKENS=${TOKENS:-128}
MAX_TOKENS=${MAX_TOKENS:-2048}
LAYERS=${LAYERS:-2} EMBED=${EMBED:-64} FFN=${FFN:-256} HEADS=${HEADS:-4}
LR=${LR:-0.003} WARMUP=${WARMUP:-200} SEED=${SEED:-1}
ARCHS=${ARCHS:-transformer_lm transformer_lm_rpe transformer_lm_urpe}
for knob in DEMO_DIR MAX_UPDATE TOKENS MAX_TOKENS LAYERS EMBED FFN HEADS LR WARMUP SEED ARCHS; do
  printf '%s=%s\n' "$knob" "${!knob}"
done

VENV=$(bash scripts/env.sh)
BIN="$VENV/bin"
DEVICE=(--cpu)
if "$BIN/python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  DEVICE=(--distributed-world-size 1)  # one GPU: the batch stays what the table says
fi
mkdir -p "$DEMO_DIR/logs"

if [ ! -f "$DEMO_DIR/data-bin/test.bin" ]; then
  echo "== binarizing data/brown"
  rm -rf "$DEMO_DIR/data-bin.tmp" "$DEMO_DIR/data-bin"
  "$BIN/fairseq-preprocess" --only-source --thresholdsrc 3 --workers 2 \
    --trainpref data/brown/train.txt --validpref data/brown/valid.txt --testpref data/brown/test.txt \
    --destdir "$DEMO_DIR/data-bin.tmp" > "$DEMO_DIR/logs/preprocess.log" 2>&1
  mv "$DEMO_DIR/data-bin.tmp" "$DEMO_DIR/data-bin"
fi

# Every size is explicit because stock `--arch transformer_lm` takes its config's defaults (input and
# output dims 512, post-norm) where the transformer_lm_* presets, ours included, apply
# base_lm_architecture (dims = embed dim, pre-norm with a final layer norm).
SIZES=(--decoder-layers "$LAYERS" --decoder-embed-dim "$EMBED" --decoder-ffn-embed-dim "$FFN"
       --decoder-input-dim "$EMBED" --decoder-output-dim "$EMBED" --decoder-normalize-before
       --decoder-attention-heads "$HEADS" --share-decoder-input-output-embed)
for arch in $ARCHS; do
  echo "== training $arch ($MAX_UPDATE updates)"
  rm -rf "$DEMO_DIR/checkpoints/$arch"  # a rerun trains afresh instead of resuming an old model
  start=$(date +%s)
  "$BIN/fairseq-train" "$DEMO_DIR/data-bin" --user-dir fairseq_urpe --task language_modeling \
    --arch "$arch" "${SIZES[@]}" "${DEVICE[@]}" --num-workers 0 \
    --tokens-per-sample "$TOKENS" --sample-break-mode none --max-tokens "$MAX_TOKENS" \
    --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 1.0 --lr "$LR" \
    --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-07 \
    --dropout 0.1 --max-update "$MAX_UPDATE" --seed "$SEED" \
    --save-dir "$DEMO_DIR/checkpoints/$arch" --no-epoch-checkpoints --keep-last-epochs 1 \
    --log-format simple --log-interval 100 > "$DEMO_DIR/logs/train-$arch.log" 2>&1
  echo $(( $(date +%s) - start )) > "$DEMO_DIR/logs/train-$arch.seconds"
  for split in valid test; do
    "$BIN/fairseq-eval-lm" "$DEMO_DIR/data-bin" --user-dir fairseq_urpe --path "$DEMO_DIR/checkpoints/$arch/checkpoint_last.pt" \
      "${DEVICE[@]}" --gen-subset "$split" --tokens-per-sample "$TOKENS" --max-tokens 8192 --num-workers 0 \
      > "$DEMO_DIR/logs/eval-$arch-$split.log" 2>&1
  done
done

"$BIN/python" - "$DEMO_DIR" $ARCHS <<'PY'
import re, sys, torch
out, archs = sys.argv[1], sys.argv[2:]
def perplexity(arch, split):
    text = open(f"{out}/logs/eval-{arch}-{split}.log").read()
    return float(re.findall(r"Perplexity: ([0-9.]+)", text)[-1])
rows = ["| arch | parameters | train seconds | valid ppl | test ppl |", "|---|---:|---:|---:|---:|"]
for arch in archs:
    state = torch.load(f"{out}/checkpoints/{arch}/checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    seen, params = set(), 0
    for name, tensor in state.items():  # tied weights appear under several names: count each once
        if tensor.is_floating_point() and tensor.data_ptr() not in seen and not name.endswith("version"):
            seen.add(tensor.data_ptr()); params += tensor.numel()
    seconds = open(f"{out}/logs/train-{arch}.seconds").read().strip()
    rows.append(f"| {arch} | {params:,} | {seconds} | {perplexity(arch, 'valid'):.2f} | {perplexity(arch, 'test'):.2f} |")
table = "\n".join(rows)
open(f"{out}/results.md", "w").write(table + "\n")
print(table)
PY
