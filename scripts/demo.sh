#!/usr/bin/env bash
# Demo: stock transformer_lm vs transformer_lm_rpe vs transformer_lm_urpe on a slice of the Brown corpus.
# Creates the environment if needed, binarizes data/brown, trains the three tiny models with identical
# settings (printing fairseq's progress: updates, loss), evaluates each with fairseq-eval-lm and prints
# a perplexity table, mean ± sample std over the seeds (also DEMO_DIR/results.md).
#   DEMO_DIR      output folder (data-bin, checkpoints, logs, results)       (default: demo-out)
#   MAX_UPDATE    updates per model                                          (default: 500)
#   TOKENS        --tokens-per-sample, training and evaluation length         (default: 128)
#   MAX_TOKENS    tokens per batch                                           (default: 2048)
#   LAYERS EMBED FFN HEADS  model size                                       (default: 2 64 256 4)
#   LR WARMUP     Adam learning rate, inverse-sqrt warm-up updates           (default: 0.003 200)
#   SEEDS         training seeds; the README's table used "1 2 3"            (default: 1)
#   LOG_INTERVAL  updates between progress lines                             (default: 50)
#   ARCHS         architectures to compare              (default: transformer_lm transformer_lm_rpe transformer_lm_urpe)
# A GPU is used when torch sees one; otherwise --cpu.
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,15p' "$0"; exit 0; fi
cd "$(dirname "$0")/.."
DEMO_DIR=${DEMO_DIR:-demo-out}
MAX_UPDATE=${MAX_UPDATE:-500}
TOKENS=${TOKENS:-128}
MAX_TOKENS=${MAX_TOKENS:-2048}
LAYERS=${LAYERS:-2} EMBED=${EMBED:-64} FFN=${FFN:-256} HEADS=${HEADS:-4}
LR=${LR:-0.003} WARMUP=${WARMUP:-200} SEEDS=${SEEDS:-1} LOG_INTERVAL=${LOG_INTERVAL:-50}
ARCHS=${ARCHS:-transformer_lm transformer_lm_rpe transformer_lm_urpe}
for knob in DEMO_DIR MAX_UPDATE TOKENS MAX_TOKENS LAYERS EMBED FFN HEADS LR WARMUP SEEDS LOG_INTERVAL ARCHS; do
  printf '%s=%s\n' "$knob" "${!knob}"
done
[ -n "$SEEDS" ] || { echo "demo.sh: SEEDS must name at least one seed" >&2; exit 2; }

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
# fairseq's progress lines (written in full to the log), shortened for the terminal:
#   [ARCH seed S] update 100/500  loss 9.30  ppl 630.2  lr 0.0015  (40 s)      loss in bits, as fairseq logs it
progress() {
  awk -v tag="$1" -v total="$MAX_UPDATE" '
    function field(name) { return match($0, "[ ,|]" name "[= ][^,| ]+") ? substr($0, RSTART + length(name) + 2, RLENGTH - length(name) - 2) : "?" }
    /\| train_inner \|/ { printf "  [%s] update %s/%s  loss %s  ppl %s  lr %s  (%s s)\n", tag, field("num_updates"), total,
                           field("loss"), field("ppl"), field("lr"), field("wall"); fflush() }
    /\| valid on/ { printf "  [%s] update %s/%s  valid loss %s  valid ppl %s\n", tag, field("num_updates"), total,
                   field("loss"), field("ppl"); fflush() }'
}
for seed in $SEEDS; do
  for arch in $ARCHS; do
    run=$arch-s$seed
    echo "== training $arch, seed $seed ($MAX_UPDATE updates; full log: $DEMO_DIR/logs/train-$run.log)"
    rm -rf "$DEMO_DIR/checkpoints/$run"  # a rerun trains afresh instead of resuming an old model
    start=$(date +%s)
    "$BIN/fairseq-train" "$DEMO_DIR/data-bin" --user-dir fairseq_urpe --task language_modeling \
      --arch "$arch" "${SIZES[@]}" "${DEVICE[@]}" --num-workers 0 \
      --tokens-per-sample "$TOKENS" --sample-break-mode none --max-tokens "$MAX_TOKENS" \
      --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 1.0 --lr "$LR" \
      --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-07 \
      --dropout 0.1 --max-update "$MAX_UPDATE" --seed "$seed" \
      --save-dir "$DEMO_DIR/checkpoints/$run" --no-epoch-checkpoints --keep-last-epochs 1 \
      --log-format simple --log-interval "$LOG_INTERVAL" --no-progress-bar 2>&1 \
      | tee "$DEMO_DIR/logs/train-$run.log" | progress "$arch seed $seed"
    echo $(( $(date +%s) - start )) > "$DEMO_DIR/logs/train-$run.seconds"
    for split in valid test; do
      "$BIN/fairseq-eval-lm" "$DEMO_DIR/data-bin" --user-dir fairseq_urpe --path "$DEMO_DIR/checkpoints/$run/checkpoint_last.pt" \
        "${DEVICE[@]}" --gen-subset "$split" --tokens-per-sample "$TOKENS" --max-tokens 8192 --num-workers 0 \
        > "$DEMO_DIR/logs/eval-$run-$split.log" 2>&1
      printf '  [%s seed %s] %s perplexity %s\n' "$arch" "$seed" "$split" \
        "$(grep -o 'Perplexity: [0-9.]*' "$DEMO_DIR/logs/eval-$run-$split.log" | tail -1 | cut -d' ' -f2)"
    done
  done
done

"$BIN/python" - "$DEMO_DIR" "$SEEDS" $ARCHS <<'PY'
import sys
from fairseq_urpe.fairseq_runs import eval_lm_result, mean_std, model_params
out, seeds, archs = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
def perplexity(run, split):
    return eval_lm_result(open(f"{out}/logs/eval-{run}-{split}.log").read()).ppl
def mean_pm_std(values):
    mean, std = mean_std(values)
    return f"{mean:.2f}" if std is None else f"{mean:.2f} ± {std:.2f}"
def parameters(run):  # as fairseq-eval-lm counts the loaded model's parameters (shared ones once)
    return model_params(open(f"{out}/logs/eval-{run}-test.log").read())
spread = "mean ± sample std over seeds " + " ".join(seeds) if len(seeds) > 1 else f"seed {seeds[0]}"
rows = [f"Perplexity per token, {spread}.", "",
        "| arch | parameters | train seconds | valid ppl | test ppl |", "|---|---:|---:|---:|---:|"]
for arch in archs:
    runs = [f"{arch}-s{seed}" for seed in seeds]
    seconds = sum(int(open(f"{out}/logs/train-{run}.seconds").read()) for run in runs) / len(runs)
    rows.append(f"| {arch} | {parameters(runs[0]):,} | {seconds:.0f} | "
                f"{mean_pm_std([perplexity(r, 'valid') for r in runs])} | {mean_pm_std([perplexity(r, 'test') for r in runs])} |")
if len(seeds) > 1:
    rows += ["", "| arch | seed | valid ppl | test ppl |", "|---|---:|---:|---:|"]
    rows += [f"| {arch} | {seed} | {perplexity(f'{arch}-s{seed}', 'valid'):.2f} | {perplexity(f'{arch}-s{seed}', 'test'):.2f} |"
             for arch in archs for seed in seeds]
table = "\n".join(rows)
open(f"{out}/results.md", "w").write(table + "\n")
print(table)
PY
