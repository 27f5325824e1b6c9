"""The performance model of docs/performance.md: forward + backward time of the fused kernel against SDPA
flash at L = 2048, d = 64, bf16 on an H100/H200, predicted from the compile report (no GPU needed).

Per kernel and per iteration of its loop over tiles (one (BLOCK_M, BLOCK_N) tile of one (batch, head)):

    issue cycles  = warps x (PTX instructions per iteration) / 4     4 schedulers per SM, one warp-instruction
                                                                      per cycle each; one program per SM
    tensor cycles = 2 x BLOCK_M x BLOCK_N x d x (products) / 4096    bf16 dense: 989 TFLOP/s = 4096 FLOP per
                                                                      cycle per SM (132 SMs, 1.83 GHz)
    cycles        = max(issue, tensor)

summed over the causal tiles at L = 2048, each kind of tile with its own loop's count: far tiles (wholly
at distances >= FAR, scalar tables), near tiles below the diagonal, and tiles on it; where the dK/dV
kernel adds the far tiles' dQ (``far_dq_grid`` in the report), its far tiles are those on that grid and
the dQ kernel runs none of them. FAR is that of the
default ``transformer_lm_urpe``: T5's 32 buckets up to distance 128, constant from distance 113 on, for
b and C alike (``constant_from``; the kernel reads the tables up to there). SDPA flash is modelled by the
same kernels compiled without tables, padding or dropout ("plain", the Triton fused-attention tutorial's
work per tile, which runs at FlashAttention-2's speed on Hopper to within ~15%). The ratio of the two
sums is the prediction; the constants common to both (clock, SM count, batch x heads, issue efficiency)
cancel. What it leaves out: the prologue and epilogue of each program, the delta kernel and table
conversions (O(T) each, a few per cent at 2048), latency the warps cannot hide, and the cost of atomics
beyond their instructions: those of the table gradients (per diagonal in near tiles, one per program
for the far ones; relaxed) and the far tiles' dQ (float32, relaxed, 4 bytes per query row and head dim
per far dK/dV tile: the same 2 bytes per entry as FlashAttention-2's backward, which adds all of dQ so).
"""

import functools
import json
import math
import os

LENGTH, HEAD_DIM = 2048, 64
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPILE_REPORT = os.path.join(REPO, "benchmarks", "results", "fused_kernel_compile.json")
PRODUCTS = {"forward": 2, "dkdv": 4, "dq": 3}  # matrix products per iteration: QK^T, PV; + dO V^T, dS Q, ...
TENSOR_FLOP_PER_CYCLE = 4096


def iterations(kernel: str, block_m: int, block_n: int, length: int = LENGTH):
    """(tiles below the diagonal, tiles on it) that the kernel's loops visit for one (batch, head)."""
    below = on = 0
    if kernel in ("forward", "dq"):  # programs over queries, loops over keys
        for start_m in range(0, length, block_m):
            first_on = ((start_m + 1) // block_n) * block_n
            below += first_on // block_n
            on += math.ceil((min(start_m + block_m, length) - first_on) / block_n)
    else:  # dkdv: programs over keys, loops over queries
        for start_n in range(0, length, block_n):
            lo = (start_n // block_m) * block_m
            above = math.ceil((start_n + block_n - 1) / block_m) * block_m
            on += math.ceil((min(above, length) - lo) / block_m)
            below += math.ceil(max(0, length - above) / block_m)
    return below, on


# Which loop of a kernel's PTX (in order) runs which tiles: the kernels before far tiles had two loops.
LOOP_ROLES = {
    3: {"forward": ("far", "near", "on"), "dq": ("far", "near", "on"), "dkdv": ("on", "near", "far")},
    2: {"forward": ("near", "on"), "dq": ("near", "on"), "dkdv": ("on", "near")},
}
MODEL_FAR = 113  # T5RelativeBias(H, 32, 128).constant_from: the default transformer_lm_urpe's tables


@functools.lru_cache(maxsize=None)
def _kernel_module():
    """The kernels' tile module, loaded once (its ``far_tiles`` holds the kernels' loop bounds)."""
    from benchmarks.fused_kernel import load

    return load("tiles")


def kernel_cycles(kernel: str, usage: dict, far=None, head_dim: int = HEAD_DIM, length: int = LENGTH):
    """Cycles of one (batch, head) of ``kernel`` from its compile-report entry ``usage``, with tables
    constant from distance ``far`` on (``None``: no far tiles, as without tables)."""
    block_m, block_n, warps = usage["tiles"][:3]
    loops = [loop["instructions"] for loop in usage["loops"]]
    if len(loops) not in LOOP_ROLES:
        raise ValueError(f"{kernel}: {len(loops)} loops in the compile report; the model knows 2 or 3")
    per = dict(zip(LOOP_ROLES[len(loops)][kernel], loops))
    if usage.get("far_branch"):  # one loop with a branch for near and far tiles: priced at its larger count
        per["near"] = per["far"] = max(loops[1:])
    below, on = iterations(kernel, block_m, block_n, length)
    far_count = skipped = 0
    if far is not None:
        far_tiles = _kernel_module().far_tiles
        # dQ's far tiles with the far share: the forward's; dK/dV's where they add dQ: on that grid
        grid = usage.get("far_dq_grid") if kernel == "dkdv" else usage.get("far_share")
        far_count = far_tiles(kernel, length, far, block_m, block_n, grid)
        if kernel == "dq" and usage.get("far_dq_grid"):  # the far tiles whose dQ dK/dV added: not run here
            skipped = far_tiles(kernel, length, far, block_m, block_n, usage["far_dq_grid"])
    if "far" not in per:  # a kernel without the far-tile loop runs its near loop there
        per["far"] = per["near"]
    products = {role: PRODUCTS[kernel] for role in per}
    if kernel == "dkdv" and usage.get("far_dq_grid"):  # its far tiles' dS K as well
        products["far"] += 1
    cycles = {role: max(warps * n / 4, 2 * block_m * block_n * head_dim * products[role] / TENSOR_FLOP_PER_CYCLE)
              for role, n in per.items()}
    return (far_count - skipped) * cycles["far"] + (below - far_count) * cycles["near"] + on * cycles["on"]


def predict(report_path: str = COMPILE_REPORT):
    """``{"no dropout": ratio, "dropout": ratio, ...}``: predicted fused URPE fwd+bwd time / SDPA flash's,
    from the compile report's sm_90 bf16 d64 entries without key padding (a language model's training
    batches have none), and ``"... with padding"`` from those with it (None where the report lacks them)."""
    try:
        with open(report_path) as f:
            results = json.load(f)["results"]
    except (OSError, ValueError, KeyError):
        return None
    plain = results.get("sm_90 bf16 d64 plain")
    if not isinstance(plain, dict):
        return None
    flash = sum(kernel_cycles(k, plain[k]) for k in ("forward", "dkdv", "dq"))
    out = {"sdpa_flash_model_cycles_per_head": flash}
    for label, name in (("no dropout", "sm_90 bf16 d64 no padding"), ("dropout", "sm_90 bf16 d64 dropout no padding"),
                        ("no dropout, with padding", "sm_90 bf16 d64"), ("dropout, with padding", "sm_90 bf16 d64 dropout")):
        entry = results.get(name)
        if isinstance(entry, dict):
            cycles = {k: kernel_cycles(k, entry[k], MODEL_FAR) for k in ("forward", "dkdv", "dq")}
            out[label] = sum(cycles.values()) / flash
            out[label + " per kernel"] = {k: v / flash for k, v in cycles.items()}
    out["sdpa flash per kernel"] = {k: kernel_cycles(k, plain[k]) / flash for k in ("forward", "dkdv", "dq")}
    return out


def predicted_line(label: str = "no dropout") -> str:
    """"predicted 1.23x (docs/performance.md)" or "no prediction" where the compile report is missing."""
    prediction = predict()
    if not prediction or label not in prediction:
        return "no prediction (run python -m benchmarks.fused_kernel --compile-check)"
    return f"predicted {prediction[label]:.2f}x (compile-report model, docs/performance.md)"


if __name__ == "__main__":
    print(json.dumps(predict(), indent=1))
