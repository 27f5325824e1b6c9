#!/usr/bin/env bash
# Step 1 of the WikiText-103 recipe: get wiki.{train,valid,test}.tokens into $RAW_DIR.
#
# Downloads wikitext-103-v1.zip (Merity et al., 2016) from the first of MIRRORS that gives a copy of the
# right size and SHA-256 (download_wikitext.py; each mirror with the User-Agent it needs), unzips it. With
# WIKITEXT_DIR set, uses an existing copy instead (no network): the three files are checked and linked
# into $RAW_DIR. Either way $RAW_DIR appears only complete, with a .done marker; a failed or interrupted
# run leaves no $RAW_DIR behind, and no zip that is not verified.
#
# Knobs (environment variables; each is printed at start):
#   WT103_DIR        root of everything the recipes write            (default: examples/wikitext103/out)
#   RAW_DIR          where the three split files go                  (default: $WT103_DIR/raw/wikitext-103)
#   WIKITEXT_DIR     existing folder with wiki.*.tokens: no download (default: unset)
#   MIRRORS          one per line: a URL of the zip (https://, file://), then the User-Agent to send it, if any
#                    (default: https://wikitext.smerity.com/wikitext-103-v1.zip (the dataset's author's host;
#                    it answers 403 to Python's default User-Agent), then the original S3 address
#                    https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip (403 since 2024))
#   EXPECTED_SIZE    size of the zip in bytes; empty skips the check   (default: 190229076)
#   EXPECTED_SHA256  SHA-256 of the zip; empty skips the check          (default: 242ba0f2...539590)
#   DOWNLOAD_DIR     where the zip is kept (wikitext-103-v1.zip; reused when it verifies)
#                                                                    (default: $WT103_DIR/downloads)
#   FORCE            1: redo even if $RAW_DIR/.done exists          (default: 0)
# Relative paths are taken from the directory you run the script in.
#
# Example:  bash examples/wikitext103/prepare.sh
#           WIKITEXT_DIR=/datasets/wikitext-103 bash examples/wikitext103/prepare.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then print_help; exit 0; fi
[ $# -eq 0 ] || die "no arguments are taken (knobs are environment variables; see --help)"

RAW_DIR=$(abspath "${RAW_DIR:-$WT103_DIR/raw/wikitext-103}")
WIKITEXT_DIR=${WIKITEXT_DIR:-}
[ -z "$WIKITEXT_DIR" ] || WIKITEXT_DIR=$(abspath "$WIKITEXT_DIR")
MIRRORS=${MIRRORS:-"https://wikitext.smerity.com/wikitext-103-v1.zip Mozilla/5.0 (X11; Linux x86_64) fairseq-urpe-prepare
https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip"}
# Size and SHA-256 of wikitext-103-v1.zip as recorded by Hugging Face datasets (wikitext/dataset_infos.json);
# its MD5, as torchtext records it, is 9ddaacaf6af0710eda8c456decff7832 (wikitext.smerity.com's ETag).
EXPECTED_SIZE=${EXPECTED_SIZE-190229076}
EXPECTED_SHA256=${EXPECTED_SHA256-242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590}
DOWNLOAD_DIR=$(abspath "${DOWNLOAD_DIR:-$WT103_DIR/downloads}")
FORCE=${FORCE:-0}
note "$SCRIPT"
show_knobs WT103_DIR RAW_DIR WIKITEXT_DIR MIRRORS EXPECTED_SIZE EXPECTED_SHA256 DOWNLOAD_DIR FORCE

if [ -f "$RAW_DIR/.done" ] && [ "$FORCE" != 1 ]; then
  check_splits "$RAW_DIR"
  note "already prepared: $RAW_DIR ($(head -n 1 "$RAW_DIR/.done")); FORCE=1 redoes it"
  exit 0
fi

[ -z "$WIKITEXT_DIR" ] || check_splits "$WIKITEXT_DIR"
mkdir -p "$(dirname "$RAW_DIR")"
staging=$(mktemp -d "$(dirname "$RAW_DIR")/.prepare.XXXXXX")
trap 'rm -rf "$staging"' EXIT

install_raw() {  # install_raw DIR SOURCE: mark DIR complete and move it to $RAW_DIR in one rename
  check_splits "$1" "$2"
  printf 'from %s, %s\n' "$2" "$(date -u +%FT%TZ)" > "$1/.done"
  rm -rf "$RAW_DIR"
  mv "$1" "$RAW_DIR"
  note "prepared $RAW_DIR:"
  ls -l "$RAW_DIR"
}

if [ -n "$WIKITEXT_DIR" ]; then
  mkdir "$staging/wikitext-103"
  for split in "${SPLITS3[@]}"; do
    ln -s "$WIKITEXT_DIR/wiki.$split.tokens" "$staging/wikitext-103/wiki.$split.tokens"
  done
  install_raw "$staging/wikitext-103" "$WIKITEXT_DIR"
  exit 0
fi

PY=$(command -v python3 || command -v python) || die "python3 is needed to download and check the zip"
mkdir -p "$DOWNLOAD_DIR"
zip=$DOWNLOAD_DIR/wikitext-103-v1.zip  # whatever a mirror calls it: its size and checksum say what it is
"$PY" "$RECIPES/download_wikitext.py" "$zip" "$EXPECTED_SIZE" "$EXPECTED_SHA256" "$MIRRORS" || exit 1

note "unzipping $zip"
if command -v unzip >/dev/null; then
  unzip -q "$zip" -d "$staging/zip" || die "could not unzip $zip"
else
  "$PY" -m zipfile -e "$zip" "$staging/zip" || die "could not unzip $zip"
fi
[ -d "$staging/zip/wikitext-103" ] || die "$zip has no folder wikitext-103/ (is it wikitext-103-v1.zip?)"
install_raw "$staging/zip/wikitext-103" "$zip:wikitext-103"
