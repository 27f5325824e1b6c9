#!/usr/bin/env bash
# Step 2 of the WikiText-103 recipe: binarize $RAW_DIR with fairseq-preprocess --only-source.
#
# Word level by default (WikiText-103's 267k-word vocabulary, for adaptive input and softmax). With
# BPE=sentencepiece, first trains a SentencePiece BPE model of VOCAB pieces on the training split and
# encodes all three splits with it (for a small-vocabulary model). Either way it also writes
# words.json, the word count of each split (words + one end-of-line per line, what the word-level
# model scores), so that eval.sh reports perplexity per word for both, on the same scale.
# Idempotent: the output folder appears complete with a .done marker, in one rename; a rerun with
# the marker present does nothing (FORCE=1 redoes it); a failed run leaves no output folder.
#
# Knobs (environment variables; each is printed at start):
#   WT103_DIR   root of everything the recipes write               (default: examples/wikitext103/out)
#   RAW_DIR     folder with wiki.{train,valid,test}.tokens           (default: $WT103_DIR/raw/wikitext-103)
#   BPE         none (words) or sentencepiece                        (default: none)
#   VOCAB       SentencePiece vocabulary size, with BPE=sentencepiece (default: 32000)
#   DATA_BIN    output folder   (default: $WT103_DIR/data-bin/wikitext-103, or ...-spm$VOCAB with BPE)
#   SRCDICT     an existing dict.txt to encode with (fairseq-preprocess --srcdict), e.g. that of a released
#               model, whose embeddings follow its dictionary's order (default: none, built from the train split)
#   WORKERS     fairseq-preprocess workers and SentencePiece threads (default: the number of CPUs)
#   FORCE       1: redo even if $DATA_BIN/.done exists              (default: 0)
#   URPE_VENV   Python environment with fairseq (created if missing) (default: .venv in the repository)
# Relative paths are taken from the directory you run the script in.
#
# Example:  bash examples/wikitext103/binarize.sh
#           BPE=sentencepiece VOCAB=32000 bash examples/wikitext103/binarize.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then print_help; exit 0; fi
[ $# -eq 0 ] || die "no arguments are taken (knobs are environment variables; see --help)"

RAW_DIR=$(abspath "${RAW_DIR:-$WT103_DIR/raw/wikitext-103}")
BPE=${BPE:-none}
VOCAB=${VOCAB:-32000}
DATA_BIN=$(abspath "${DATA_BIN:-$(default_data_bin)}")
SRCDICT=${SRCDICT:+$(abspath "$SRCDICT")}
WORKERS=${WORKERS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 4)}
FORCE=${FORCE:-0}
note "$SCRIPT"
show_knobs WT103_DIR RAW_DIR BPE VOCAB DATA_BIN SRCDICT WORKERS FORCE
case $BPE in none | sentencepiece) ;; *) die "BPE must be none or sentencepiece, got BPE=$BPE" ;; esac
if [ "$BPE" = sentencepiece ]; then
  [[ $VOCAB =~ ^[0-9]+$ ]] && [ "$VOCAB" -ge 300 ] || die "VOCAB must be an integer >= 300 (256 byte pieces are part of it), got VOCAB=$VOCAB"
fi
[[ $WORKERS =~ ^[1-9][0-9]*$ ]] || die "WORKERS must be a positive integer, got WORKERS=$WORKERS"
[ -z "$SRCDICT" ] || [ -f "$SRCDICT" ] || die "no such file: SRCDICT=$SRCDICT"

if [ -f "$DATA_BIN/.done" ] && [ "$FORCE" != 1 ]; then
  note "already binarized: $DATA_BIN ($(head -n 1 "$DATA_BIN/.done")); FORCE=1 redoes it"
  exit 0
fi
check_splits "$RAW_DIR"
find_venv

mkdir -p "$(dirname "$DATA_BIN")"
staging=$(mktemp -d "$DATA_BIN.tmp.XXXXXX")
trap 'rm -rf "$staging"' EXIT

text=$RAW_DIR
if [ "$BPE" = sentencepiece ]; then
  note "training a SentencePiece BPE model of $VOCAB pieces on $RAW_DIR/wiki.train.tokens"
  "$BIN/python" "$RECIPES/sentencepiece_bpe.py" train "$RAW_DIR/wiki.train.tokens" "$staging/spm" "$VOCAB" "$WORKERS"
  mkdir "$staging/text"
  for split in "${SPLITS3[@]}"; do
    note "encoding wiki.$split.tokens"
    "$BIN/python" "$RECIPES/sentencepiece_bpe.py" encode "$staging/spm.model" "$WORKERS" \
      "$RAW_DIR/wiki.$split.tokens" "$staging/text/wiki.$split.tokens"
  done
  text=$staging/text
fi

note "fairseq-preprocess ($WORKERS workers)"
"$BIN/fairseq-preprocess" --only-source --workers "$WORKERS" --destdir "$staging" ${SRCDICT:+--srcdict "$SRCDICT"} \
  --trainpref "$text/wiki.train.tokens" --validpref "$text/wiki.valid.tokens" --testpref "$text/wiki.test.tokens"
# (fairseq-preprocess keeps its own log in $DATA_BIN/preprocess.log)
rm -rf "$staging/text"
for split in "${SPLITS3[@]}"; do
  [ -s "$staging/$split.bin" ] || die "fairseq-preprocess wrote no $split.bin (see the log above)"
done
note "counting words (perplexity per word)"
"$BIN/python" "$RECIPES/count_words.py" "$staging/words.json" \
  "valid=$RAW_DIR/wiki.valid.tokens" "test=$RAW_DIR/wiki.test.tokens"

printf 'from %s, BPE=%s%s%s, %s\n' "$RAW_DIR" "$BPE" "$([ "$BPE" = none ] || echo " VOCAB=$VOCAB")" \
  "${SRCDICT:+ SRCDICT=$SRCDICT}" "$(date -u +%FT%TZ)" > "$staging/.done"
rm -rf "$DATA_BIN"
mv "$staging" "$DATA_BIN"
note "binarized $DATA_BIN: $(($(wc -l < "$DATA_BIN/dict.txt") + 4)) symbols (dict.txt + 4 special)"
cat "$DATA_BIN/words.json"
