#!/usr/bin/env bash
# Run the whole test suite, as CI does (creating the environment first if needed): the tests marked slow
# too, which a plain `pytest` leaves out (pytest.ini). Extra arguments go to pytest instead, which then
# leaves them out unless asked: `bash scripts/test.sh -m "not e2e"` (no fairseq tools run), `-m ""` (all).
#   TRITON_CACHE_DIR  Triton's compile cache (default: a fresh empty directory, removed at the end, so a
#                     run proves what a fresh machine does; set it to reuse a cache between runs)
#   SECOND_TRITON     on a full run (no extra arguments), the tests that depend on triton's version (marker
#                     every_triton: the sm_80/86/90 compile check, the version check, the real self-check,
#                     the interpreter's arithmetic at every dtype and at Hopper's float16 tiles, and
#                     triton's random numbers for dropout) run again under this triton, in an
#                     overlay environment $SECOND_VENV holding only it over .venv's packages, in one more
#                     process beside the main run (default: triton==3.7.1, the one torch 2.13.0's CUDA
#                     build pins; empty: skip)
#   SECOND_VENV       where that overlay lives (default: .venv-triton371)
#   TEST_WORKERS      pytest processes of the main run (pytest-xdist; default: auto, one per core; 0: none).
#                     Each test file runs whole in one process, tests/cli and tests/recipes each in one
#                     (their session fixtures), the longest first (tests/conftest.py); one torch thread per
#                     process unless OMP_NUM_THREADS says otherwise.
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,18p' "$0"; exit 0; fi
cd "$(dirname "$0")/.."
VENV=$(bash scripts/env.sh)
SECOND_TRITON=${SECOND_TRITON-triton==3.7.1}
SECOND_VENV=${SECOND_VENV:-.venv-triton371}
remove=()  # what the script made, removed at its end
second=""  # the background run's process
cleanup() { [ -z "$second" ] || kill "$second" 2>/dev/null || true; rm -rf "${remove[@]}"; }
trap cleanup EXIT
if [ -z "${TRITON_CACHE_DIR:-}" ]; then
  TRITON_CACHE_DIR=$(mktemp -d -t urpe-triton-cache.XXXXXX)
  remove+=("$TRITON_CACHE_DIR")
fi
export TRITON_CACHE_DIR
echo "== TRITON_CACHE_DIR=$TRITON_CACHE_DIR SECOND_TRITON=$SECOND_TRITON SECOND_VENV=$SECOND_VENV" >&2
WORKERS=(-n "${TEST_WORKERS:-auto}")  # with pytest.ini's --dist loadgroup --no-loadscope-reorder
if [ $# -gt 0 ] || [ -z "$SECOND_TRITON" ]; then
  [ $# -gt 0 ] || set -- -m ""  # everything, slow tests included
  status=0
  "$VENV/bin/python" -m pytest "${WORKERS[@]}" "$@" || status=$?
  exit "$status"
fi

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
# The version-dependent tests under the second triton, in the background with a cache of their own (empty: nothing
# compiled by the main run), their output shown after the main run's.
second_dir=$(mktemp -d -t urpe-second-triton.XXXXXX)
remove+=("$second_dir")
second_log=$second_dir/pytest.log
second_version=$("$SECOND_VENV/bin/python" -c 'import triton; print("triton", triton.__version__)')
URPE_WRITE_GROUP_SECONDS= TRITON_CACHE_DIR=$second_dir/cache "$SECOND_VENV/bin/python" -m pytest -n 0 -p no:cacheprovider \
  -m every_triton tests/kernels >"$second_log" 2>&1 &
second=$!
main_status=0
"$VENV/bin/python" -m pytest "${WORKERS[@]}" -m "" || main_status=$?
second_status=0
wait "$second" || second_status=$?
second=""
echo "== the tests that depend on triton's version (marker every_triton) under $second_version, run beside the above:" >&2
cat "$second_log"
[ "$main_status" = 0 ] || exit "$main_status"
exit "$second_status"
