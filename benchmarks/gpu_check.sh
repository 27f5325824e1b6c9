#!/usr/bin/env bash
# One command for the GPU questions of the attention paths: correctness on the GPU (fused vs the reference
# vs the dense path; fp16, bf16, fp32; head dims 64, 128; padding; dropout; guard memory; compute-sanitizer
# where installed), kernel time and memory against PyTorch's SDPA (L = 512 .. 4096), and training steps of
# the _wiki103 archs (stock, RPE and URPE, dense and fused), and which path runs: the kernel, FlexAttention
# and the dense path checked against float64, timed beside SDPA flash at L2048 d64 bf16 and L3072 d128
# fp16 with and without dropout, the fastest that passed written to the dispatch table that
# --urpe-attention-impl auto reads. Writes $OUT.json and $OUT.md (and the table, on a GPU).
# Each section runs in its own process under a time limit, catches its own failures and keeps what it
# measured; the total stays under BUDGET_S. Without CUDA it runs what it can under Triton's interpreter
# at tiny sizes (the test suite does exactly that).
# Needs, on the machine: this repository and its environment (bash scripts/env.sh: torch with CUDA, triton,
# fairseq); nothing is downloaded. Optional: compute-sanitizer (CUDA toolkit) on PATH or in /usr/local/cuda.
#   PYTHON     interpreter with torch, triton, fairseq      (default: .venv/bin/python)
#   OUT        output path without extension                (default: benchmarks/results/gpu_check; without
#              CUDA benchmarks/results/gpu_check_cpu, so a CPU run never replaces GPU numbers)
#   BUDGET_S   seconds for all sections together            (default: 570)
#   SECTIONS   which sections, in order                     (default: environment correctness guard_memory
#              kernel_speed paths end_to_end sanitizer)
#   DISPATCH_TABLE  where the paths section writes the table (default: where auto reads it,
#              $FAIRSEQ_URPE_DISPATCH_TABLE or ~/.cache/fairseq_urpe/dispatch_table.json)
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
BUDGET_S=${BUDGET_S:-570}
SECTIONS=${SECTIONS:-environment correctness guard_memory kernel_speed paths end_to_end sanitizer}
[ -x "$PYTHON" ] || { echo "gpu_check.sh: no Python at PYTHON=$PYTHON (run bash scripts/env.sh, or set PYTHON)" >&2; exit 2; }
if "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  GPU=1
else
  GPU=0
  export TRITON_INTERPRET=1  # before triton is imported: the kernels run on CPU, slowly
fi
OUT=${OUT:-benchmarks/results/$([ "$GPU" = 1 ] && echo gpu_check || echo gpu_check_cpu)}
echo "== gpu_check: PYTHON=$PYTHON OUT=$OUT BUDGET_S=$BUDGET_S GPU=$GPU SECTIONS=$SECTIONS DISPATCH_TABLE=${DISPATCH_TABLE:-where auto reads it}" >&2
mkdir -p "$(dirname "$OUT")"
rm -f "$OUT.json"
start0=$(date +%s)

if [ "$GPU" = 0 ]; then
  # CPU mode: every section in one process (no CUDA context to protect), under one time limit; the
  # GPU-only sections record themselves as skipped.
  set +e
  timeout --kill-after=10 "$BUDGET_S" "$PYTHON" -m benchmarks.gpu_check --section "${SECTIONS// /,}" \
    --json "$OUT.json" --budget-s $((BUDGET_S > 30 ? BUDGET_S - 15 : BUDGET_S / 2))
  code=$?
  set -e
  codes=()
  for section in $SECTIONS; do codes+=("$section=$code"); done
  "$PYTHON" -m benchmarks.gpu_check --json "$OUT.json" --report "$OUT.md" --exit-codes "$(IFS=,; echo "${codes[*]}")"
  awk '/^## Targets/{p=1} /^## /&&!/Targets/{p=0} p' "$OUT.md" >&2  # measured beside predicted
  echo "== gpu_check: done (CPU mode) in $(($(date +%s) - start0))s; $OUT.md" >&2
  exit 0
fi

# Seconds per section, in the default order; a section's unused time passes on to the ones after it.
declare -A SHARE=([environment]=25 [correctness]=105 [guard_memory]=60 [kernel_speed]=95 [paths]=120 [end_to_end]=105 [sanitizer]=60)
start=$(date +%s)
codes=()
sections=($SECTIONS)
for i in "${!sections[@]}"; do
  section=${sections[$i]}
  [ -n "${SHARE[$section]:-}" ] || { echo "gpu_check.sh: unknown section $section" >&2; exit 2; }
  later=0
  for next in "${sections[@]:$((i + 1))}"; do later=$((later + SHARE[$next])); done
  left=$((BUDGET_S - ($(date +%s) - start) - later))
  limit=$((left > SHARE[$section] ? left : SHARE[$section]))
  limit=$((limit < BUDGET_S - ($(date +%s) - start) ? limit : BUDGET_S - ($(date +%s) - start)))
  if [ "$limit" -lt 5 ]; then codes+=("$section=124"); echo "== $section: no time left" >&2; continue; fi
  echo "== $section (at most ${limit}s)" >&2
  set +e
  # The section stops starting new cases 15 s before its limit; timeout ends it if a case hangs.
  timeout --kill-after=10 "$limit" "$PYTHON" -m benchmarks.gpu_check --section "$section" --json "$OUT.json" \
    --budget-s $((limit > 30 ? limit - 15 : limit / 2))
  code=$?
  set -e
  codes+=("$section=$code")
done
"$PYTHON" -m benchmarks.gpu_check --json "$OUT.json" --report "$OUT.md" --exit-codes "$(IFS=,; echo "${codes[*]}")"
awk '/^## Targets/{p=1} /^## /&&!/Targets/{p=0} p' "$OUT.md" >&2  # measured beside predicted
echo "== gpu_check: done in $(($(date +%s) - start))s; $OUT.md" >&2
