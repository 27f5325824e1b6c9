#!/usr/bin/env bash
# Run the test suite (creating the environment first if needed). Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not e2e"` for the fast tests only.
#   TRITON_CACHE_DIR  Triton's compile cache (default: a fresh empty directory, removed at the end, so a
#                     run proves what a fresh machine does; set it to reuse a cache between runs)
#   SECOND_TRITON     after a full run (no extra arguments), the kernel tests and the sm_80/86/90 compile
#                     check run again under this triton, in an overlay environment $SECOND_VENV holding
#                     only it over .venv's packages (default: triton==3.7.1, the one torch 2.13.0's CUDA
#                     build pins; empty: skip)
#   SECOND_VENV       where that overlay lives (default: .venv-triton371)
#   TEST_WORKERS      pytest processes (pytest-xdist; default: auto, one per core; 0: none). Each test
#                     file runs whole in one process, tests/cli and tests/recipes each in one (their
#                     session fixtures: tests/conftest.py); one torch thread per process unless
#                     OMP_NUM_THREADS says otherwise.
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,14p' "$0"; exit 0; fi
cd "$(dirname "$0")/.."
VENV=$(bash scripts/env.sh)
SECOND_TRITON=${SECOND_TRITON-triton==3.7.1}
SECOND_VENV=${SECOND_VENV:-.venv-triton371}
if [ -z "${TRITON_CACHE_DIR:-}" ]; then
  TRITON_CACHE_DIR=$(mktemp -d -t urpe-triton-cache.XXXXXX)
  trap 'rm -rf "$TRITON_CACHE_DIR"' EXIT
fi
export TRITON_CACHE_DIR
echo "== TRITON_CACHE_DIR=$TRITON_CACHE_DIR SECOND_TRITON=$SECOND_TRITON SECOND_VENV=$SECOND_VENV" >&2
WORKERS=(-n "${TEST_WORKERS:-auto}" --dist loadgroup)
if [ "${TEST_WORKERS:-auto}" = 0 ]; then WORKERS=(-p no:xdist); fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$VENV/bin/python" -m pytest "${WORKERS[@]}" "$@"
if [ $# -gt 0 ] || [ -z "$SECOND_TRITON" ]; then exit 0; fi

# The overlay: a venv with only $SECOND_TRITON, which sees .venv's packages after its own (a .pth file).
want=${SECOND_TRITON#triton==}
if ! "$SECOND_VENV/bin/python" -c "import sys, triton; sys.exit(triton.__version__ != '$want')" 2>/dev/null; then
  echo "== creating $SECOND_VENV with $SECOND_TRITON over $VENV's packages" >&2
  "$VENV/bin/python" -m venv --clear "$SECOND_VENV"
  "$SECOND_VENV/bin/python" -m pip install --disable-pip-version-check -q --no-deps "$SECOND_TRITON" >&2
  base=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  own=$("$SECOND_VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "import site; site.addsitedir('$(realpath "$base")')" > "$own/zz_urpe_base_venv.pth"
fi
TRITON_CACHE_DIR=$(mktemp -d -p "$TRITON_CACHE_DIR")  # empty again: nothing compiled by the first run
echo "== kernel tests under $("$SECOND_VENV/bin/python" -c 'import triton; print("triton", triton.__version__)')" >&2
TRITON_CACHE_DIR=$TRITON_CACHE_DIR "$SECOND_VENV/bin/python" -m pytest "${WORKERS[@]}" tests/kernels -p no:cacheprovider
