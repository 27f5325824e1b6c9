#!/usr/bin/env bash
# Create (once) the Python environment the demo and the tests run in, then print its path.
#   URPE_VENV    where the virtual environment lives          (default: .venv in the repository)
#   URPE_PYTHON  interpreter used to create it                (default: python3)
#   TORCH_SPEC   torch requirement when torch is not present  (default: torch==2.13.0, the tested one)
#   TORCH_PIP_ARGS extra pip arguments for torch (default: none). PyPI's torch is a CUDA build; on a
#                CPU-only machine without a local CPU wheel, pass an index URL that serves CPU wheels.
#   TRITON_SPEC  triton installed only where torch brought none (a CPU build of torch), for the kernel
#                tests under Triton's interpreter (default: triton==3.9.0). A CUDA torch's own triton
#                (torch 2.13.0: triton==3.7.1) is never replaced.
# To bring your own torch: create the venv with --system-site-packages over a Python that has it,
# or install torch into $URPE_VENV first; an importable torch is never replaced.
set -euo pipefail
if [ "${1:-}" = "--help" ]; then sed -n '2,12p' "$0"; exit 0; fi
cd "$(dirname "$0")/.."
VENV=${URPE_VENV:-.venv}
PY=${URPE_PYTHON:-python3}

# The environment is reused while requirements.txt and setup.py are unchanged (a stamp holds their hash).
STAMP="$VENV/.fairseq-urpe-requirements"
TRITON_SPEC=${TRITON_SPEC:-triton==3.9.0}
WANT=$( (cat requirements.txt setup.py; echo "$TRITON_SPEC") | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ] \
  && "$VENV/bin/python" -c "import fairseq, fairseq_urpe, pytest" 2>/dev/null; then
  echo "$VENV"; exit 0
fi
{
  echo "== creating environment in $VENV (URPE_PYTHON=$PY)"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  pip=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    spec=${TORCH_SPEC:-torch==2.13.0}
    echo "== installing $spec ${TORCH_PIP_ARGS:-}"
    # shellcheck disable=SC2086
    "${pip[@]}" "$spec" ${TORCH_PIP_ARGS:-}
  fi
  echo "== installing fairseq's and the plugin's requirements"
  "${pip[@]}" -r requirements.txt setuptools wheel
  if ! "$VENV/bin/python" -c "import triton" 2>/dev/null \
    && "$VENV/bin/python" -c "import platform, sys; sys.exit(platform.system() != 'Linux' or platform.machine() != 'x86_64')"; then
    echo "== torch brought no triton (a CPU build): installing $TRITON_SPEC for the kernel tests"
    "${pip[@]}" --no-deps "$TRITON_SPEC"
  fi
  echo "== installing fairseq (compiles C extensions the first time: a few minutes; pip caches the wheel)"
  "${pip[@]}" --no-build-isolation --no-deps \
    "fairseq==0.12.2; python_version < '3.11'" "fairseq-fixed==0.12.3.1; python_version >= '3.11'"
  "${pip[@]}" --no-build-isolation --no-deps -e .
  "$VENV/bin/python" -c "import fairseq, fairseq_urpe, torch; print('== fairseq', fairseq.__version__, 'torch', torch.__version__)"
  echo "$WANT" > "$STAMP"
} >&2
echo "$VENV"
