"""The performance model of docs/performance.md: forward + backward time of the fused URPE kernel against
SDPA flash on an H100/H200, predicted from the compile report (no GPU needed), at two points:

    README     L = 2048, d = 64, bf16   (GPT-2 small's heads)
    recipe     L = 3072, d = 128, fp16, attention dropout 0.1   (the _wiki103 archs: 8 heads)

SDPA flash is ``benchmarks/flash_standin.py``: FlashAttention-2's shape (causal forward; one-pass backward,
dQ by float32 atomics on every tile), no tables, compiled by the same path. URPE has the default
``transformer_lm_urpe`` tables: T5's 32 buckets up to distance 128, constant from distance 113 on
(``MODEL_FAR``), so most of its tiles are far tiles (scalar tables).

Per kernel and per iteration of its loop over tiles (one (BLOCK_M, BLOCK_N) tile of one (batch, head)):

    issue cycles  = warps x (PTX instructions per iteration) / 4     4 schedulers per SM, one warp-instruction
                                                                      per cycle each; one program per SM
    tensor cycles = 2 x BLOCK_M x BLOCK_N x d x (products) / 4096    16-bit dense: 989 TFLOP/s = 4096 FLOP
                                                                      per cycle per SM (132 SMs, 1.83 GHz)
    cycles        = max(issue, tensor)                               ("model")

summed over the causal tiles, each kind of tile (far, near, on the diagonal) with its own loop's count.
The prediction is URPE's sum over flash's; clock, SM count and batch x heads cancel. The range is the
least and the most of the ratio under each of these alternatives, one at a time:

    no overlap    cycles = issue + tensor (the warps hide no tensor-core latency behind instructions)
    calibrated    + a fixed number of cycles per iteration on both sides, so that the stand-in runs at
                  FlashAttention-2's published 232 TFLOP/s (H100, causal, d64, L 2k, fwd+bwd) instead of
                  the model's figure (the latency the model leaves out, as the same cost per tile)
    occupancy     a kernel whose registers let 2+ programs share an SM priced "model", one that fits
                  once per SM (255 registers x 8 warps) "no overlap"
    atomics       dQ's float32 atomics priced at L2 bandwidth (5.5 TB/s over 132 SMs: 22.8 bytes per SM
                  cycle) and not overlapped: flash on every backward tile, URPE on its far dK/dV tiles

Left out on both sides: prologues and epilogues, the O(T) kernels (delta, dQ's conversion, table
conversions: a few per cent), waves (programs / SMs), the table gradients' atomics (URPE's, per diagonal).
"""

import functools
import json
import math
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPILE_REPORT = os.path.join(REPO, "benchmarks", "results", "fused_kernel_compile.json")
LENGTH, HEAD_DIM = 2048, 64
POINTS = {  # label: (length, head dim, dtype, heads as the arch has them)
    "L2048 d64 bf16": (2048, 64, "bf16", 16),
    "L3072 d128 fp16": (3072, 128, "fp16", 8),
}
# matrix products per iteration: QK^T, PV; + dO V^T, dP^T dO, dS^T Q; dQ's QK^T, dO V^T, dS K; flash all five
PRODUCTS = {"forward": 2, "dkdv": 4, "dq": 3, "backward": 5}
LOOP_ROLES = {  # which loop of a kernel's PTX (in order) runs which tiles
    "forward": ("far", "near", "on"), "dq": ("far", "near", "on"), "dkdv": ("on", "near", "far"),
    "flash forward": ("near", "on"), "flash backward": ("on", "near"),
}
URPE_KERNELS, FLASH_KERNELS = ("forward", "dkdv", "dq"), ("forward", "backward")
TENSOR_FLOP_PER_CYCLE = 4096
CLOCK_HZ, SMS = 1.83e9, 132
FLASH_PUBLISHED_TFLOPS = 232.0  # FlashAttention-2, H100, causal, d64, L 2k, forward + backward
L2_BYTES_PER_SM_CYCLE = 5.5e12 / (SMS * CLOCK_HZ)
REGISTERS_PER_SM = 65536
MODEL_FAR = 113  # T5RelativeBias(H, 32, 128).constant_from: the default transformer_lm_urpe's tables
SCENARIOS = ("model", "no overlap", "calibrated", "occupancy", "atomics")


def iterations(kernel: str, block_m: int, block_n: int, length: int = LENGTH):
    """(tiles below the diagonal, tiles on it) that the kernel's loops visit for one (batch, head)."""
    below = on = 0
    if kernel in ("forward", "dq"):  # programs over queries, loops over keys
        for start_m in range(0, length, block_m):
            first_on = ((start_m + 1) // block_n) * block_n
            below += first_on // block_n
            on += math.ceil((min(start_m + block_m, length) - first_on) / block_n)
    else:  # dkdv, flash's backward: programs over keys, loops over queries
        for start_n in range(0, length, block_n):
            lo = (start_n // block_m) * block_m
            above = math.ceil((start_n + block_n - 1) / block_m) * block_m
            on += math.ceil((min(above, length) - lo) / block_m)
            below += math.ceil(max(0, length - above) / block_m)
    return below, on


@functools.lru_cache(maxsize=None)
def _kernel_module():
    """The kernels' tile module, loaded once (its ``far_tiles`` holds the kernels' loop bounds)."""
    from benchmarks.fused_kernel import load

    return load("tiles")


def programs_per_sm(usage: dict) -> int:
    """Programs of this kernel that fit on one SM by registers (the model's other limits are not binding)."""
    threads = usage["tiles"][2] * 32
    return REGISTERS_PER_SM // (threads * max(usage.get("registers") or 255, 1))


def kernel_cycles(kernel: str, usage: dict, far=None, head_dim: int = HEAD_DIM, length: int = LENGTH,
                  scenario: str = "model", per_iteration: float = 0.0, flash: bool = False):
    """Cycles of one (batch, head) of ``kernel`` from its compile-report entry ``usage``, with tables
    constant from distance ``far`` on (``None``: no far tiles, as without tables); ``flash``: the entry is
    the stand-in's. ``scenario``: one of ``SCENARIOS`` (``per_iteration``: the calibrated cycles)."""
    block_m, block_n, warps = usage["tiles"][:3]
    loops = [loop["instructions"] for loop in usage["loops"]]
    roles = LOOP_ROLES[f"flash {kernel}" if flash else kernel]
    if len(loops) != len(roles):
        raise ValueError(f"{kernel}: {len(loops)} loops in the compile report; the model knows {len(roles)}")
    per = dict(zip(roles, loops))
    below, on = iterations(kernel, block_m, block_n, length)
    far_count = skipped = 0
    if far is not None and not flash:
        far_tiles = _kernel_module().far_tiles
        # dQ's far tiles with the far share: the forward's; dK/dV's where they add dQ: on that grid
        grid = usage.get("far_dq_grid") if kernel == "dkdv" else usage.get("far_share")
        far_count = far_tiles(kernel, length, far, block_m, block_n, grid)
        if kernel == "dq" and usage.get("far_dq_grid"):  # the far tiles whose dQ dK/dV added: not run here
            skipped = far_tiles(kernel, length, far, block_m, block_n, usage["far_dq_grid"])
    if "far" not in per:  # a kernel without the far-tile loop runs its near loop there
        per["far"] = per["near"]
    products = {role: PRODUCTS[kernel] for role in per}
    atomic_bytes = {role: 0 for role in per}
    if kernel == "dkdv" and usage.get("far_dq_grid"):  # its far tiles' dS K as well, added by atomics
        products["far"] += 1
        atomic_bytes["far"] = 4 * block_m * head_dim
    if flash and kernel == "backward":
        atomic_bytes = {role: 4 * block_m * head_dim for role in per}
    overlap = scenario != "no overlap" and (scenario != "occupancy" or programs_per_sm(usage) >= 2)
    cycles = {}
    for role, n in per.items():
        issue, tensor = warps * n / 4, 2 * block_m * block_n * head_dim * products[role] / TENSOR_FLOP_PER_CYCLE
        cycles[role] = max(issue, tensor) if overlap else issue + tensor
        if scenario == "calibrated":
            cycles[role] += per_iteration
        if scenario == "atomics":
            cycles[role] += atomic_bytes[role] / L2_BYTES_PER_SM_CYCLE
    return (far_count - skipped) * cycles["far"] + (below - far_count) * cycles["near"] + on * cycles["on"]


def _iterations_per_head(entry: dict, kernels, length: int, far=None, flash: bool = False) -> int:
    """Loop iterations of one (batch, head) over ``kernels`` (what the calibration adds a cost to)."""
    ones = {k: dict(entry[k], loops=[{"instructions": 0}] * len(entry[k]["loops"])) for k in kernels}
    return sum(kernel_cycles(k, ones[k], far, 0, length, "calibrated", 1.0, flash) for k in kernels)


def _sum(entry, kernels, head_dim, length, far, scenario, per_iteration, flash):
    return sum(kernel_cycles(k, entry[k], far, head_dim, length, scenario, per_iteration, flash) for k in kernels)


def calibration(results: dict) -> float:
    """Cycles per loop iteration the stand-in needs beyond the model to run at FlashAttention-2's published
    speed at d64, L 2048 (the latency the model leaves out); used at both points."""
    flash = results["sm_90 bf16 d64 flash"]
    modelled = _sum(flash, FLASH_KERNELS, 64, 2048, None, "model", 0.0, True)
    flop = 7 * 2048 ** 2 * 64  # causal forward (2 products) + backward (2.5x): 3.5 x 2 T^2 d / 2 x 2
    real = flop / (FLASH_PUBLISHED_TFLOPS * 1e12 / (SMS * CLOCK_HZ))
    return max(real - modelled, 0.0) / _iterations_per_head(flash, FLASH_KERNELS, 2048, flash=True)


def modelled_tflops(results: dict, point: str = "L2048 d64 bf16", dropout: bool = False) -> float:
    """The stand-in's speed as the model (no calibration) has it, fwd+bwd, causal FLOPs."""
    length, head_dim, dtype, _ = POINTS[point]
    flash = results[f"sm_90 {dtype} d{head_dim}{' dropout' if dropout else ''} flash"]
    cycles = _sum(flash, FLASH_KERNELS, head_dim, length, None, "model", 0.0, True)
    return 7 * length ** 2 * head_dim / (cycles / CLOCK_HZ) * SMS / 1e12


def load_results(report_path: str = COMPILE_REPORT):
    try:
        with open(report_path) as f:
            return json.load(f)["results"]
    except (OSError, ValueError, KeyError):
        return None


def predict(report_path: str = COMPILE_REPORT):
    """Per point (``POINTS``) and case, ``{"model": ratio, "range": (least, most), <scenario>: ratio}``:
    fused URPE fwd+bwd time / the stand-in's, from the compile report's sm_90 entries without key padding.
    Cases: "no dropout" (both without), "dropout / flash without" (the speed target's denominator),
    "dropout / flash with" (SDPA flash with the same dropout). None where the report lacks an entry.
    The README point's "no dropout" and "dropout" (over flash without) are also at the top level."""
    results = load_results(report_path)
    if results is None:
        return None
    names = [f"sm_90 {dt} d{d}{dr} {v}" for _, d, dt, _ in POINTS.values() for dr in ("", " dropout")
             for v in ("no padding", "flash")]
    if not all(isinstance(results.get(n), dict) for n in names):
        return None
    per_iteration = calibration(results)
    out = {"calibration_cycles_per_iteration": per_iteration}
    for point, (length, head_dim, dtype, _) in POINTS.items():
        entry = {(dr, v): results[f"sm_90 {dtype} d{head_dim}{dr} {v}"] for dr in ("", " dropout")
                 for v in ("no padding", "flash")}
        cases = {"no dropout": ("", ""), "dropout / flash without": (" dropout", ""),
                 "dropout / flash with": (" dropout", " dropout")}
        out[point] = {}
        for case, (urpe_dropout, flash_dropout) in cases.items():
            ratios = {}
            for scenario in SCENARIOS:
                urpe = _sum(entry[urpe_dropout, "no padding"], URPE_KERNELS, head_dim, length, MODEL_FAR, scenario,
                            per_iteration, False)
                flash = _sum(entry[flash_dropout, "flash"], FLASH_KERNELS, head_dim, length, None, scenario,
                             per_iteration, True)
                ratios[scenario] = urpe / flash
            out[point][case] = dict(ratios, range=(min(ratios.values()), max(ratios.values())))
        out[point]["registers"] = {
            "urpe": sorted({entry[dr, "no padding"][k]["registers"] for dr in ("", " dropout") for k in URPE_KERNELS}),
            "flash": sorted({entry[dr, "flash"][k]["registers"] for dr in ("", " dropout") for k in FLASH_KERNELS})}
    readme = out["L2048 d64 bf16"]
    out["no dropout"], out["dropout"] = readme["no dropout"]["model"], readme["dropout / flash without"]["model"]
    out["no dropout range"] = readme["no dropout"]["range"]
    out["dropout range"] = readme["dropout / flash without"]["range"]
    return out


def predicted_line(label: str = "no dropout") -> str:
    """"predicted 1.23x (1.10-1.40x; docs/performance.md)" or "no prediction" without a compile report."""
    prediction = predict()
    if not prediction or label not in prediction:
        return "no prediction (run python -m benchmarks.fused_kernel --compile-check)"
    low, high = prediction[label + " range"]
    return (f"predicted {prediction[label]:.2f}x, range {low:.2f}-{high:.2f}x "
            "(compile-report model, docs/performance.md)")


def table(prediction: dict, results: dict) -> str:
    """The prediction as ``python -m benchmarks.gpu_check.prediction`` prints it."""
    lines = ["fused URPE fwd+bwd time / SDPA flash's (stand-in: benchmarks/flash_standin.py), H100/H200, predicted "
             "from benchmarks/results/fused_kernel_compile.json", "",
             "| point | case | model | range | " + " | ".join(SCENARIOS[1:]) + " |",
             "|---|---|---|---|" + "---|" * (len(SCENARIOS) - 1)]
    for point in POINTS:
        for case in ("no dropout", "dropout / flash without", "dropout / flash with"):
            r = prediction[point][case]
            lines.append(f"| {point} | {case} | {r['model']:.2f}x | {r['range'][0]:.2f}-{r['range'][1]:.2f}x | "
                         + " | ".join(f"{r[s]:.2f}x" for s in SCENARIOS[1:]) + " |")
    lines.append("")
    for point in POINTS:
        regs = prediction[point]["registers"]
        lines.append(f"{point}: registers URPE {regs['urpe']}, flash {regs['flash']}; the stand-in modelled at "
                     f"{modelled_tflops(results, point):.0f} TFLOP/s without dropout")
    lines += [f"calibrated: {prediction['calibration_cycles_per_iteration']:.0f} cycles per loop iteration on both "
              f"sides (the stand-in at {FLASH_PUBLISHED_TFLOPS:.0f} TFLOP/s at L2048 d64)",
              "dropout: attention dropout 0.1 on URPE; 'flash without' divides by SDPA flash without dropout (the "
              "speed target's denominator), 'flash with' by SDPA flash with dropout 0.1"]
    return "\n".join(lines)


if __name__ == "__main__":
    prediction = predict()
    if prediction is None:
        raise SystemExit("no prediction: run python -m benchmarks.fused_kernel --compile-check")
    print(table(prediction, load_results()))
