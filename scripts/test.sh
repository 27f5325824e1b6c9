#!/usr/bin/env bash
# Run the test suite (creating the environment first if needed). Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not e2e"` for the fast tests only.
#   TRITON_CACHE_DIR  Triton's compile cache (default: a fresh empty directory, removed at the end, so a
#                     run proves what a fresh machine does; set it to reuse a cache between runs)
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,5p' "$0"; exit 0; fi
cd "$(dirname "$0")/.."
VENV=$(bash scripts/env.sh)
if [ -z "${TRITON_CACHE_DIR:-}" ]; then
  TRITON_CACHE_DIR=$(mktemp -d -t urpe-triton-cache.XXXXXX)
  trap 'rm -rf "$TRITON_CACHE_DIR"' EXIT
fi
export TRITON_CACHE_DIR
echo "== TRITON_CACHE_DIR=$TRITON_CACHE_DIR" >&2
"$VENV/bin/python" -m pytest "$@"
