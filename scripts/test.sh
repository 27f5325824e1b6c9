#!/usr/bin/env bash
# Run the test suite (creating the environment first if needed). Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not e2e"` for the fast tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(bash scripts/env.sh)
exec "$VENV/bin/python" -m pytest "$@"
