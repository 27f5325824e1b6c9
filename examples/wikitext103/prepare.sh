#!/usr/bin/env bash
# Step 1 of the WikiText-103 recipe: get wiki.{train,valid,test}.tokens into $RAW_DIR.
#
# Downloads wikitext-103-v1.zip (Merity et al., 2016), checks its size and SHA-256, unzips it. With
# WIKITEXT_DIR set, uses an existing copy instead (no network): the three files are checked and
# linked into $RAW_DIR. Either way $RAW_DIR appears only complete, with a .done marker; a failed or
# interrupted run leaves no $RAW_DIR behind (a partial download stays as .part, verified before use).
#
# Knobs (environment variables; each is printed at start):
#   WT103_DIR        root of everything the recipes write            (default: examples/wikitext103/out)
#   RAW_DIR          where the three split files go                  (default: $WT103_DIR/raw/wikitext-103)
#   WIKITEXT_DIR     existing folder with wiki.*.tokens: no download (default: unset)
#   URL              where to download the zip from (a mirror, or file:///path/to/wikitext-103-v1.zip)
#                    (default: https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip)
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
URL=${URL:-https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip}
# Size and SHA-256 of wikitext-103-v1.zip as recorded by Hugging Face datasets (wikitext/dataset_infos.json);
# its MD5, as torchtext records it, is 9ddaacaf6af0710eda8c456decff7832.
EXPECTED_SIZE=${EXPECTED_SIZE-190229076}
EXPECTED_SHA256=${EXPECTED_SHA256-242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590}
DOWNLOAD_DIR=$(abspath "${DOWNLOAD_DIR:-$WT103_DIR/downloads}")
FORCE=${FORCE:-0}
note "$SCRIPT"
show_knobs WT103_DIR RAW_DIR WIKITEXT_DIR URL EXPECTED_SIZE EXPECTED_SHA256 DOWNLOAD_DIR FORCE

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

PY=$(command -v python3 || command -v python) || die "python3 is needed to check the download"

file_size() { "$PY" -c 'import os, sys; print(os.path.getsize(sys.argv[1]))' "$1"; }
file_sha256() {
  "$PY" - "$1" <<'PY'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
print(h.hexdigest())
PY
}
verify() {  # verify FILE: the size and SHA-256 match the knobs, or say how they differ (return 1)
  local size sha
  size=$(file_size "$1")
  if [ -n "$EXPECTED_SIZE" ] && [ "$size" != "$EXPECTED_SIZE" ]; then
    echo "$SCRIPT: $1 has $size bytes, expected EXPECTED_SIZE=$EXPECTED_SIZE$([ "$size" -lt "$EXPECTED_SIZE" ] && echo ' (truncated download?)')" >&2
    return 1
  fi
  if [ -n "$EXPECTED_SHA256" ]; then
    sha=$(file_sha256 "$1")
    if [ "$sha" != "$EXPECTED_SHA256" ]; then
      echo "$SCRIPT: $1 has SHA-256 $sha, expected EXPECTED_SHA256=$EXPECTED_SHA256" >&2
      return 1
    fi
  fi
}

mkdir -p "$DOWNLOAD_DIR"
zip=$DOWNLOAD_DIR/wikitext-103-v1.zip  # whatever the URL calls it: its size and checksum say what it is
if [ -f "$zip" ] && verify "$zip"; then
  note "using the verified $zip"
else
  [ ! -f "$zip" ] || { note "discarding $zip (it does not verify)"; rm -f "$zip"; }
  note "downloading $URL"
  if command -v curl >/dev/null; then
    # -C -: a .part left by an interrupted run is continued; a failed check deletes it (below).
    curl -fL --retry 3 -C - -o "$zip.part" "$URL" || { rc=$?; rm -f "$zip.part"; die "download failed: $URL (curl exit code $rc)"; }
  else
    "$PY" - "$URL" "$zip.part" <<'PY' || { rm -f "$zip.part"; die "download failed: $URL"; }
import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1]) as r, open(sys.argv[2], "wb") as f:
    shutil.copyfileobj(r, f, 1 << 20)
PY
  fi
  if ! verify "$zip.part"; then
    rm -f "$zip.part"
    die "the download from $URL does not verify (deleted; rerun to download again, or set URL to a mirror)"
  fi
  mv "$zip.part" "$zip"
fi

note "unzipping $zip"
if command -v unzip >/dev/null; then
  unzip -q "$zip" -d "$staging/zip" || die "could not unzip $zip"
else
  "$PY" -m zipfile -e "$zip" "$staging/zip" || die "could not unzip $zip"
fi
[ -d "$staging/zip/wikitext-103" ] || die "$zip has no folder wikitext-103/ (is it wikitext-103-v1.zip?)"
install_raw "$staging/zip/wikitext-103" "$zip:wikitext-103"
