"""The performance model of docs/performance.md: forward + backward time of the fused kernel against SDPA
flash at L = 2048, d = 64, bf16 on an H100/H200, predicted from the compile report (no GPU needed).

Per kernel and per iteration of its loop over tiles (one (BLOCK_M, BLOCK_N) tile of one (batch, head)):

    issue cycles  = warps x (PTX instructions per iteration) / 4     4 schedulers per SM, one warp-instruction
                                                                      per cycle each; one program per SM
    tensor cycles = 2 x BLOCK_M x BLOCK_N x d x (products) / 4096    bf16 dense: 989 TFLOP/s = 4096 FLOP per
                                                                      cycle per SM (132 SMs, 1.83 GHz)
    cycles        = max(issue, tensor)

summed over the causal tiles at L = 2048 (those below the diagonal with the first loop's count, those on
it with the second's). SDPA flash is modelled by the same kernels compiled without tables, padding or
dropout ("plain", the Triton fused-attention tutorial's work per tile, which runs at FlashAttention-2's
speed on Hopper to within ~15%). The ratio of the two sums is the prediction; the constants common to
both (clock, SM count, batch x heads, issue efficiency) cancel. What it leaves out: the prologue and
epilogue of each program, the delta kernel and table conversions (O(T) each, a few per cent at 2048),
latency the warps cannot hide, and the atomics of the table gradients (2 per tile, relaxed).
"""

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


def kernel_cycles(kernel: str, usage: dict, head_dim: int = HEAD_DIM, length: int = LENGTH):
    """Cycles of one (batch, head) of ``kernel`` from its compile-report entry ``usage``."""
    block_m, block_n, warps = usage["tiles"][:3]
    loops = [loop["instructions"] for loop in usage["loops"]]
    below, on = iterations(kernel, block_m, block_n, length)
    tensor = 2 * block_m * block_n * head_dim * PRODUCTS[kernel] / TENSOR_FLOP_PER_CYCLE
    per_below = max(warps * loops[0] / 4, tensor)
    per_on = max(warps * loops[-1] / 4, tensor)
    return below * per_below + on * per_on


def far_share(kernel: str, block_m: int, block_n: int, max_distance: int = 128, length: int = LENGTH) -> float:
    """The share of a kernel's tiles wholly past ``max_distance`` (every entry's i - j >= it): where a
    table constant from there on is one scalar (the far-tile path, not implemented)."""
    far = total = 0
    for start_m in range(0, length, block_m):
        for start_n in range(0, min(start_m + block_m, length), block_n):
            total += 1
            far += start_m - (start_n + block_n - 1) >= max_distance
    return far / total


def predict_far_tiles(report_path: str = COMPILE_REPORT, extra=None, max_distance: int = 128):
    """What the far-tile path would give: far tiles at the plain kernel's cost plus ``extra`` instructions
    per iteration (a scalar bias add and C multiply per entry, and in the kernel with the table gradients
    two tile sums and two atomics), near tiles as now."""
    extra = extra or {"forward": 64, "dkdv": 96, "dq": 160}
    with open(report_path) as f:
        results = json.load(f)["results"]
    plain = results["sm_90 bf16 d64 plain"]
    flash = sum(kernel_cycles(k, plain[k]) for k in ("forward", "dkdv", "dq"))
    out = {}
    for label, name in (("no dropout", "sm_90 bf16 d64"), ("dropout", "sm_90 bf16 d64 dropout")):
        total = 0.0
        for k in ("forward", "dkdv", "dq"):
            entry, base = results[name][k], plain[k]
            share = far_share(k, *entry["tiles"][:2], max_distance)
            far_entry = dict(base, tiles=entry["tiles"],
                             loops=[{"instructions": base["loops"][0]["instructions"] + extra[k]
                                     + (entry["loops"][0]["instructions"] - results["sm_90 bf16 d64"][k]["loops"][0]["instructions"])}])
            total += share * kernel_cycles(k, far_entry) + (1 - share) * kernel_cycles(k, entry)
        out[label] = total / flash
    return out


def predict(report_path: str = COMPILE_REPORT):
    """``{"no dropout": ratio, "dropout": ratio, ...}``: predicted fused URPE fwd+bwd time / SDPA flash's,
    from the compile report's sm_90 bf16 d64 entries (None where the report lacks them)."""
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
    for label, name in (("no dropout", "sm_90 bf16 d64"), ("dropout", "sm_90 bf16 d64 dropout")):
        entry = results.get(name)
        if isinstance(entry, dict):
            cycles = {k: kernel_cycles(k, entry[k]) for k in ("forward", "dkdv", "dq")}
            out[label] = sum(cycles.values()) / flash
            out[label + " per kernel"] = {k: v / flash for k, v in cycles.items()}
    return out


def predicted_line(label: str = "no dropout") -> str:
    """"predicted 1.23x (docs/performance.md)" or "no prediction" where the compile report is missing."""
    prediction = predict()
    if not prediction or label not in prediction:
        return "no prediction (run python -m benchmarks.fused_kernel --compile-check)"
    return f"predicted {prediction[label]:.2f}x (compile-report model, docs/performance.md)"


if __name__ == "__main__":
    print(json.dumps(dict(predict(), far_tile_path=predict_far_tiles()), indent=1))
