# Sourced by the WikiText-103 recipes (not run on its own): paths, the environment, knobs, errors.
# Every recipe sources it first thing; nothing here has an effect beyond defining these names.

RECIPES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$RECIPES/../.." && pwd)
SCRIPT=$(basename "$0")

die() {  # die MESSAGE...: print "<script>: error: MESSAGE" on stderr and exit 1
  echo "$SCRIPT: error: $*" >&2
  exit 1
}

note() { echo "== $*"; }

abspath() {  # a path given relative to the directory the recipe was started from, made absolute
  case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac
}

print_help() {  # the comment block at the top of the script, without the '#'
  sed -n '2,/^[^#]/p' "$0" | sed -n 's/^# \{0,1\}//p'
}

show_knobs() {  # show_knobs NAME...: print each knob with its value, as the recipe will use it
  local knob
  for knob in "$@"; do printf '  %s=%s\n' "$knob" "${!knob}"; done
}

# The Python environment with fairseq and the plugin: $URPE_VENV if it has fairseq-train already,
# else the repository's .venv, created by scripts/env.sh when missing (a few minutes, once).
find_venv() {
  local venv=${URPE_VENV:-$REPO/.venv}
  case $venv in /*) ;; *) venv=$REPO/$venv ;; esac
  if [ ! -x "$venv/bin/fairseq-train" ] || [ ! -x "$venv/bin/python" ]; then
    URPE_VENV=$venv bash "$REPO/scripts/env.sh" >/dev/null || die "could not create the environment in $venv (scripts/env.sh)"
  fi
  BIN=$venv/bin
}

# Where the learned relative bias b starts (RPE_INIT, --rpe-init) when RPE_INIT is not set, in every recipe:
# zero, flat, as the URPE paper's models start (the plugin's own --rpe-init default is alibi; the recipes always
# pass RPE_INIT explicitly).
RPE_INIT_DEFAULT=zero

# WT103_DIR holds everything the recipes write: raw/ (prepare), data-bin/ (binarize),
# checkpoints/, logs/, tensorboard/ (train), results/ (eval, run_baselines).
WT103_DIR=$(abspath "${WT103_DIR:-$RECIPES/out}")

# The binarized data a BPE/VOCAB setting gives (binarize.sh writes it, train.sh and eval.sh read it).
default_data_bin() {
  if [ "${BPE:-none}" = sentencepiece ]; then
    echo "$WT103_DIR/data-bin/wikitext-103-spm${VOCAB:-32000}"
  else
    echo "$WT103_DIR/data-bin/wikitext-103"
  fi
}

SPLITS3=(train valid test)

# check_splits DIR [NAME]: the three WikiText-103 files in DIR exist, are readable and not empty, or
# die naming the first that is not (as NAME/wiki.<split>.tokens; NAME defaults to DIR).
check_splits() {
  local dir=$1 name=${2:-$1} split
  [ -d "$dir" ] || die "no such directory: $name"
  for split in "${SPLITS3[@]}"; do
    [ -e "$dir/wiki.$split.tokens" ] || die "missing $name/wiki.$split.tokens (a WikiText-103 folder holds wiki.train.tokens, wiki.valid.tokens and wiki.test.tokens)"
    [ -r "$dir/wiki.$split.tokens" ] || die "unreadable file: $name/wiki.$split.tokens"
    [ -s "$dir/wiki.$split.tokens" ] || die "empty file: $name/wiki.$split.tokens"
  done
}
