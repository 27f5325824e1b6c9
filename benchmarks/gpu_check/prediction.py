"""The performance model of docs/performance.md: forward + backward time of the fused URPE kernel against
SDPA flash on an H100/H200, predicted from the compile report's SASS (no GPU needed), at two points:

    L2048 d64 bf16    GPT-2 small's heads (the README's point)
    L3072 d128 fp16   the _wiki103 archs (the recipe's point)

for two kinds of tables: "t5" (transformer_lm_urpe's default, T5's 32 buckets up to distance 128, constant
from distance 113 on: ``MODEL_FAR``, so most tiles are far tiles with scalar tables) and "alibi" (tables
that reach T, as ALiBi's, log, KERPLE or learned ones: no far tiles). SDPA flash is
``benchmarks/flash_standin.py``: FlashAttention-2's shape (causal forward; one-pass backward, dQ by
float32 atomics on every tile), no tables, compiled by the same path.

Per kernel and per iteration of its loop over tiles (one (BLOCK_M, BLOCK_N) tile of one (batch, head)),
with n the SASS instructions of that loop's iteration (``nvdisasm``; the compile report's ``sass``):

    issue  = warps x n / 4                          4 schedulers per SM, one warp-instruction per cycle each
    mufu   = warps x 32 x (MUFU in n) / 16          16 special-function results per SM per cycle (exp2, rcp)
    tensor = 2 BLOCK_M BLOCK_N d x products / 4096  16-bit dense, 989 TFLOP/s = 4096 FLOP per SM cycle
    l2     = bytes from L2 / 22.8                   5.5 TB/s over 132 SMs at 1.83 GHz: the tiles the loop
                                                    loads (2-byte elements, row statistics, table slices)
                                                    and its float32 atomics (dQ, table gradients)
    cycles = max(issue, mufu, tensor, l2)           ("model": the pipes overlap perfectly)

summed over the causal tiles, each kind of tile (far, near, on the diagonal) with its own loop's count.
The ratio is URPE's sum over the stand-in's: clock, SM count and batch x heads cancel. Each other column
changes one assumption of "model", on both sides; the range is the least and the most of them:

    no L2         l2 = 0: loads and atomics free (the model without its bandwidth term)
    no overlap    cycles = max(issue, mufu) + tensor + l2 (no warp hides another's latency)
    occupancy     a kernel that fits 2+ programs per SM (registers, shared memory) priced "model", one
                  that fits once "no overlap"
    atomics       the float32 atomics' bytes added after the max, at L2 bandwidth, not overlapped
                  (a read-modify-write in L2 that the warps wait on)
    wide issue    issue = warps x n / 8: issue time halved, an optimistic bound (instructions counted that
                  cost no issue slot of their own, e.g. the uniform datapath's); the tensor-bound side gains less

The stand-in's absolute speed (causal FLOPs 7 L^2 d per head over its modelled time) is printed per column
beside FlashAttention-2's published figures, and a column enters the range only where it puts the
stand-in within 1.5x of them (``admissible``; the others are printed, marked). Left out on both sides:
prologues and epilogues, the O(T) kernels (delta, dQ's conversion, table conversions: a few per cent), waves (programs over SMs), wgmma
latency and the dependency of each product on the softmax before it (what FlashAttention-3's warp
specialisation hides), and shared-memory bandwidth.
"""

import functools
import json
import math
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPILE_REPORT = os.path.join(REPO, "benchmarks", "results", "fused_kernel_compile.json")
ONE_PASS_REPORT = os.path.join(REPO, "benchmarks", "results", "fused_kernel_compile_one_pass.json")
LENGTH, HEAD_DIM = 2048, 64
POINTS = {  # label: (length, head dim, dtype, heads as the arch has them)
    "L2048 d64 bf16": (2048, 64, "bf16", 16),
    "L3072 d128 fp16": (3072, 128, "fp16", 8),
}
KINDS = ("t5", "alibi")
CASES = {"no dropout": ("", ""), "dropout / flash without": (" dropout", ""),
         "dropout / flash with": (" dropout", " dropout")}
PRINTED_CASES = ("no dropout", "dropout / flash without")  # (predict() has all three)
# matrix products per iteration: QK^T, PV; + dO V^T, dP^T dO, dS^T Q; dQ's QK^T, dO V^T, dS K; flash all five
PRODUCTS = {"forward": 2, "dkdv": 4, "dq": 3, "backward": 5}
LOOP_ROLES = {  # which loop of a kernel (in order) runs which tiles
    "forward": ("far", "near", "on"), "dq": ("far", "near", "on"), "dkdv": ("on", "near", "far"),
    "flash forward": ("near", "on"), "flash backward": ("on", "near"),
}
URPE_KERNELS, FLASH_KERNELS = ("forward", "dkdv", "dq"), ("forward", "backward")
TENSOR_FLOP_PER_CYCLE = 4096
MUFU_PER_CYCLE = 16  # per SM (4 per scheduler), sm_90's special-function units
CLOCK_HZ, SMS = 1.83e9, 132
# FlashAttention-2's README, H100 80GB SXM5, causal, forward + backward (read from its plot): TFLOP/s by point
FLASH_PUBLISHED_TFLOPS = {"L2048 d64 bf16": 232.0, "L3072 d128 fp16": 280.0}
PUBLISHED_WITHIN = 1.5  # a scenario enters the range where it puts the stand-in within this factor of them
L2_BYTES_PER_SM_CYCLE = 5.5e12 / (SMS * CLOCK_HZ)
REGISTERS_PER_SM, SHARED_PER_SM = 65536, 228 * 1024
MODEL_FAR = 113  # T5RelativeBias(H, 32, 128).constant_from: the default transformer_lm_urpe's tables
SCENARIOS = ("model", "no L2", "no overlap", "occupancy", "atomics", "wide issue")
ELEMENT_BYTES = 2


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
    """Programs of this kernel that fit on one SM by registers and shared memory."""
    threads = usage["tiles"][2] * 32
    by_registers = REGISTERS_PER_SM // (threads * max(usage.get("registers") or 255, 1))
    return min(by_registers, SHARED_PER_SM // max(usage.get("shared_bytes") or 1, 1))


def loop_bytes(kernel: str, role: str, usage: dict, head_dim: int, flash: bool = False):
    """``(loaded, atomic)``: bytes one iteration reads from L2 (its tiles of q/k/v/dO, row statistics,
    table slices) and adds by float32 atomics (dQ; URPE's near-tile table gradients)."""
    block_m, block_n = usage["tiles"][:2]
    tables = 0 if flash or role == "far" else 2 * (block_m + block_n - 1) * 4  # b and c slices, float32
    if kernel in ("forward", "dq"):  # loops over keys: K, V tiles
        loaded, atomic = 2 * block_n * head_dim * ELEMENT_BYTES + tables, 0
        if kernel == "dq" and role != "far":  # per-diagonal sums of both tables
            atomic = 2 * (block_m + block_n - 1) * 4
    else:  # loops over queries: Q, dO tiles and row statistics
        loaded, atomic = 2 * block_m * head_dim * ELEMENT_BYTES + 3 * block_m * 4 + tables, 0
        if flash or usage.get("one_pass") or (role == "far" and usage.get("far_dq_grid")):  # dQ added by atomics
            atomic = 4 * block_m * head_dim
        if usage.get("one_pass") and role != "far":  # and per-diagonal sums of both tables
            atomic += 2 * (block_m + block_n - 1) * 4
    return loaded, atomic


def kernel_cycles(kernel: str, usage: dict, far=None, head_dim: int = HEAD_DIM, length: int = LENGTH,
                  scenario: str = "model", flash: bool = False, count: str = "sass"):
    """Cycles of one (batch, head) of ``kernel`` from its compile-report entry ``usage``, with tables
    constant from distance ``far`` on (``None``: no far tiles, as tables that reach T); ``flash``: the
    entry is the stand-in's. ``scenario``: one of ``SCENARIOS``. ``count``: "sass" (the loops nvdisasm
    finds) or "ptx" (the PTX's, ``usage["loops"]``)."""
    block_m, block_n, warps = usage["tiles"][:3]
    loops = usage["sass"]["loops"] if count == "sass" else usage["loops"]
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
    overlap = scenario not in ("no overlap", "occupancy") or (scenario == "occupancy" and programs_per_sm(usage) >= 2)
    cycles = {}
    for role, loop in per.items():
        dq_here = usage.get("one_pass") or (role == "far" and usage.get("far_dq_grid"))
        products = PRODUCTS[kernel] + (1 if kernel == "dkdv" and dq_here else 0)
        issue = warps * loop["instructions"] / (8 if scenario == "wide issue" else 4)
        mufu = warps * 32 * loop.get("mufu", 0) / MUFU_PER_CYCLE
        tensor = 2 * block_m * block_n * head_dim * products / TENSOR_FLOP_PER_CYCLE
        loaded, atomic = loop_bytes(kernel, role, usage, head_dim, flash) if count == "sass" else (0, 0)
        l2 = 0.0 if scenario == "no L2" else (loaded + atomic) / L2_BYTES_PER_SM_CYCLE
        cycles[role] = max(issue, mufu, tensor, l2) if overlap else max(issue, mufu) + tensor + l2
        if scenario == "atomics":
            cycles[role] += atomic / L2_BYTES_PER_SM_CYCLE
    return (far_count - skipped) * cycles["far"] + (below - far_count) * cycles["near"] + on * cycles["on"]


def _sum(entry, kernels, head_dim, length, far, scenario, flash):
    return sum(kernel_cycles(k, entry[k], far, head_dim, length, scenario, flash) for k in kernels)


def standin_tflops(results: dict, point: str, scenario: str = "model", dropout: bool = False) -> float:
    """The stand-in's speed in the model, fwd+bwd, causal FLOPs (7 L^2 d per head) on 132 SMs."""
    length, head_dim, dtype, _ = POINTS[point]
    flash = results[f"sm_90 {dtype} d{head_dim}{' dropout' if dropout else ''} flash"]
    cycles = _sum(flash, FLASH_KERNELS, head_dim, length, None, scenario, True)
    return 7 * length ** 2 * head_dim / (cycles / CLOCK_HZ) * SMS / 1e12


def admissible(standin: dict, point: str):
    """The scenarios whose modelled stand-in (``standin``: TFLOP/s per scenario, without dropout) lies
    within ``PUBLISHED_WITHIN`` of FlashAttention-2's published speed at ``point``: those the range spans
    (all of them where none does)."""
    published = FLASH_PUBLISHED_TFLOPS[point]
    kept = tuple(s for s in SCENARIOS if 1 / PUBLISHED_WITHIN <= standin[s] / published <= PUBLISHED_WITHIN)
    return kept or SCENARIOS


def load_results(report_path: str = COMPILE_REPORT):
    try:
        with open(report_path) as f:
            return json.load(f)["results"]
    except (OSError, ValueError, KeyError):
        return None


def predict(report_path: str = COMPILE_REPORT):
    """Per point (``POINTS``), kind (``KINDS``) and case (``CASES``), ``{<scenario>: ratio, "range":
    (least, most)}``: fused URPE fwd+bwd time / the stand-in's, from the compile report's sm_90 entries
    without key padding. Cases: "no dropout" (both without), "dropout / flash without" (the speed
    target's denominator), "dropout / flash with" (SDPA flash with the same dropout). ``"standin"``: per
    point the stand-in's TFLOP/s per scenario. The README point's T5 ranges are also at the top level
    ("no dropout range", "dropout range"). None where the report lacks an entry."""
    results = load_results(report_path)
    if results is None:
        return None
    names = [f"sm_90 {dt} d{d}{dr} {v}" for _, d, dt, _ in POINTS.values() for dr in ("", " dropout")
             for v in KINDS + ("flash",)]
    if not all(isinstance(results.get(n), dict) and results[n]["forward"].get("sass") for n in names):
        return None
    out = {}
    for point, (length, head_dim, dtype, _) in POINTS.items():
        standin = {s: standin_tflops(results, point, s) for s in SCENARIOS}
        kept = admissible(standin, point)
        out[point] = {"standin": standin, "admissible": kept}
        for kind in KINDS:
            far = MODEL_FAR if kind == "t5" else None
            out[point][kind] = {}
            for case, (urpe_dropout, flash_dropout) in CASES.items():
                urpe = results[f"sm_90 {dtype} d{head_dim}{urpe_dropout} {kind}"]
                flash = results[f"sm_90 {dtype} d{head_dim}{flash_dropout} flash"]
                ratios = {s: _sum(urpe, URPE_KERNELS, head_dim, length, far, s, False)
                          / _sum(flash, FLASH_KERNELS, head_dim, length, None, s, True) for s in SCENARIOS}
                inside = [ratios[s] for s in kept]
                out[point][kind][case] = dict(ratios, range=(min(inside), max(inside)))
    readme = out["L2048 d64 bf16"]["t5"]
    out["no dropout range"] = readme["no dropout"]["range"]
    out["dropout range"] = readme["dropout / flash without"]["range"]
    return out


def predict_one_pass(report_path: str = COMPILE_REPORT, one_pass_path: str = ONE_PASS_REPORT):
    """As :func:`predict`, with the one-pass backward (``one_pass_path``'s dK/dV entries: dQ and the table
    gradients by atomics on every tile, no dQ kernel) in place of the split one: per point, kind and printed
    case ``{<scenario>: ratio, "range": ...}`` over the same admissible scenarios; None without both reports."""
    results, single = load_results(report_path), load_results(one_pass_path)
    split = predict(report_path)
    if split is None or single is None:
        return None
    out = {}
    for point, (length, head_dim, dtype, _) in POINTS.items():
        kept = split[point]["admissible"]
        out[point] = {}
        for kind in KINDS:
            far = MODEL_FAR if kind == "t5" else None
            out[point][kind] = {}
            for case in PRINTED_CASES:
                urpe_dropout, flash_dropout = CASES[case]
                name = f"sm_90 {dtype} d{head_dim}{urpe_dropout} {kind}"
                if not isinstance(single.get(name), dict):
                    return None
                urpe = {"forward": results[name]["forward"], "dkdv": single[name]["dkdv"]}
                flash = results[f"sm_90 {dtype} d{head_dim}{flash_dropout} flash"]
                ratios = {s: _sum(urpe, ("forward", "dkdv"), head_dim, length, far, s, False)
                          / _sum(flash, FLASH_KERNELS, head_dim, length, None, s, True) for s in SCENARIOS}
                inside = [ratios[s] for s in kept]
                out[point][kind][case] = dict(ratios, range=(min(inside), max(inside)),
                                              tiles=single[name]["dkdv"]["tiles"],
                                              spill=single[name]["dkdv"]["spill_bytes"])
    return out


def one_pass_table(single: dict, split: dict) -> str:
    """The one-pass backward's prediction beside the split one's ranges."""
    lines = ["the one-pass backward (dK/dV adds dQ and the table gradients by atomics, no dQ kernel; its dK/dV from "
             "benchmarks/results/fused_kernel_compile_one_pass.json, tiles.ONE_PASS_BLOCKS) against the split one, "
             "same model and scenarios", "",
             "| point | tables | case | one-pass range | split range | one-pass dK/dV tile, spilled bytes | "
             + " | ".join(SCENARIOS) + " |", "|---|---|---|---|---|---|" + "---|" * len(SCENARIOS)]
    for point in POINTS:
        kept = split[point]["admissible"]
        for kind in KINDS:
            for case in PRINTED_CASES:
                r, s = single[point][kind][case], split[point][kind][case]
                m, n, w = r["tiles"][:3]
                lines.append(f"| {point} | {kind} | {case} | {r['range'][0]:.2f}-{r['range'][1]:.2f}x | "
                             f"{s['range'][0]:.2f}-{s['range'][1]:.2f}x | {m}x{n}, {w} warps, {r['spill']} | "
                             + " | ".join(f"{r[x]:.2f}x{'' if x in kept else '*'}" for x in SCENARIOS) + " |")
    return "\n".join(lines)


def predicted_line(label: str = "no dropout") -> str:
    """"predicted 1.10-1.40x (docs/performance.md)" or "no prediction" without a compile report."""
    prediction = predict()
    if not prediction or label + " range" not in prediction:
        return "no prediction (run python -m benchmarks.fused_kernel --compile-check)"
    low, high = prediction[label + " range"]
    return f"predicted {low:.2f}-{high:.2f}x (compile-report model, docs/performance.md)"


def per_score_rows(results: dict, capability: int = 90, dropouts=("", " dropout")):
    """SASS thread-instructions per score of each loop, URPE against the stand-in, per point, kind and
    dropout: forward near (far) loop over the stand-in's forward below-diagonal loop; backward near (far):
    dK/dV's plus dQ's near (far) loops over the stand-in's one-pass below-diagonal loop. With the far share
    and dQ in dK/dV, dQ's far loop runs few tiles and dK/dV's far loop already holds dS K: the far backward
    is dK/dV's far loop alone there."""
    rows = []
    for point, (_, head_dim, dtype, _) in POINTS.items():
        for dropout in dropouts:
            flash = results.get(f"sm_{capability} {dtype} d{head_dim}{dropout} flash")
            if not isinstance(flash, dict):
                continue
            f_fwd = dict(zip(LOOP_ROLES["flash forward"], flash["forward"]["sass"]["loops"]))["near"]["per_score"]
            f_bwd = dict(zip(LOOP_ROLES["flash backward"], flash["backward"]["sass"]["loops"]))["near"]["per_score"]
            for kind in KINDS:
                urpe = results.get(f"sm_{capability} {dtype} d{head_dim}{dropout} {kind}")
                if not isinstance(urpe, dict):
                    continue
                loops = {k: dict(zip(LOOP_ROLES[k], urpe[k]["sass"]["loops"])) for k in URPE_KERNELS}
                score = {k: {r: x["per_score"] for r, x in v.items()} for k, v in loops.items()}
                near_bwd = score["dkdv"]["near"] + score["dq"]["near"]
                far_bwd = score["dkdv"]["far"] + (0 if urpe["dkdv"].get("far_dq_grid") else score["dq"]["far"])
                rows.append(dict(capability=capability, point=point, dropout=bool(dropout), kind=kind,
                                 forward_near=score["forward"]["near"], forward_far=score["forward"]["far"],
                                 backward_near=near_bwd, backward_far=far_bwd, flash_forward=f_fwd,
                                 flash_backward=f_bwd))
    return rows


def per_score_table(results: dict, capabilities=(90,), dropout: bool = False) -> str:
    lines = ["SASS per score (thread-instructions per tile entry, one loop iteration), URPE and the stand-in "
             "(flash); near: tiles below the diagonal within the tables, far: past them",
             "", "| sm | point | dropout | tables | fwd near | fwd far | flash fwd | bwd near | bwd far | flash bwd | "
             "near fwd, bwd | far fwd, bwd |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for cap in capabilities:
        for r in per_score_rows(results, cap, ("", " dropout") if dropout else ("",)):
            ff, fb = r["flash_forward"], r["flash_backward"]
            far = r["kind"] == "t5"  # tables that reach T run no far tile
            lines.append(f"| {cap} | {r['point']} | {'yes' if r['dropout'] else 'no'} | {r['kind']} | "
                         f"{r['forward_near']:.1f} | {r['forward_far']:.1f} | {ff:.1f} | {r['backward_near']:.1f} | "
                         f"{r['backward_far']:.1f} | {fb:.1f} | {r['forward_near'] / ff:.2f}x, "
                         f"{r['backward_near'] / fb:.2f}x | "
                         + (f"{r['forward_far'] / ff:.2f}x, {r['backward_far'] / fb:.2f}x |" if far
                            else "(none run) |"))
    return "\n".join(lines)


def loop_table(results: dict, config: str = "sm_90 bf16 d64") -> str:
    """Each loop's SASS per iteration of the ``config`` entries (T5 tables and the stand-in, no dropout)."""
    lines = [f"SASS per loop iteration, {config}, no dropout (t5 tables; the stand-in)", "",
             "| kernel | loop | tile, warps | SASS | per score | MUFU | shared | SHFL | RED/ATOM | MMA |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for variant, kernels in (("t5", URPE_KERNELS), ("flash", FLASH_KERNELS)):
        entry = results[f"{config} {variant}"]
        for kernel in kernels:
            usage = entry[kernel]
            roles = LOOP_ROLES[f"flash {kernel}" if variant == "flash" else kernel]
            m, n, w = usage["tiles"][:3]
            for role, x in zip(roles, usage["sass"]["loops"]):
                lines.append(f"| {'flash ' if variant == 'flash' else ''}{kernel} | {role} | {m}x{n}, {w} | "
                             f"{x['instructions']} | {x['per_score']:.1f} | {x['mufu']} | {x['shared']} | "
                             f"{x['shuffle']} | {x['atomics']} | {x['mma']} |")
    return "\n".join(lines)


def table(prediction: dict, results: dict) -> str:
    """The prediction as ``python -m benchmarks.gpu_check.prediction`` prints it."""
    lines = ["fused URPE fwd+bwd time / SDPA flash's (stand-in: benchmarks/flash_standin.py), H100/H200, predicted "
             "from the SASS in benchmarks/results/fused_kernel_compile.json", "",
             "| point | tables | case | range | " + " | ".join(SCENARIOS) + " |",
             "|---|---|---|---|" + "---|" * len(SCENARIOS)]
    for point in POINTS:
        for kind in KINDS:
            for case in PRINTED_CASES:
                r = prediction[point][kind][case]
                kept = prediction[point]["admissible"]
                lines.append(f"| {point} | {kind} | {case} | {r['range'][0]:.2f}-{r['range'][1]:.2f}x | "
                             + " | ".join(f"{r[s]:.2f}x{'' if s in kept else '*'}" for s in SCENARIOS) + " |")
    lines += ["", "the stand-in's fwd+bwd TFLOP/s without dropout in the model, beside FlashAttention-2's published "
              "figure (H100, causal):", "",
              "| point | range | " + " | ".join(SCENARIOS) + " | FlashAttention-2 | range / published |",
              "|---|---|" + "---|" * len(SCENARIOS) + "---|---|"]
    for point in POINTS:
        t, kept = prediction[point]["standin"], prediction[point]["admissible"]
        low, high, published = min(t[s] for s in kept), max(t[s] for s in kept), FLASH_PUBLISHED_TFLOPS[point]
        lines.append(f"| {point} | {low:.0f}-{high:.0f} | " + " | ".join(f"{t[s]:.0f}{'' if s in kept else '*'}"
                                                                         for s in SCENARIOS)
                     + f" | {published:.0f} | {low / published:.2f}-{high / published:.2f}x |")
    lines += ["", f"*: outside the range: the scenario puts the stand-in more than {PUBLISHED_WITHIN}x from "
              "FlashAttention-2's published speed at that point (the range spans the others)",
              "t5: transformer_lm_urpe's default tables (constant from distance 113: far tiles); alibi: tables "
              "that reach T (no far tiles). dropout: attention dropout 0.1 on URPE over SDPA flash without dropout (the "
              "speed target's denominator)"]
    return "\n".join(lines)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", default=COMPILE_REPORT, help="the compile report to price")
    parser.add_argument("--sm", type=int, nargs="+", default=[90], help="architectures of the SASS-per-score table")
    parser.add_argument("--dropout", action="store_true", help="the SASS-per-score table with dropout too")
    args = parser.parse_args(argv)
    prediction = predict(args.report)
    if prediction is None:
        raise SystemExit("no prediction: run python -m benchmarks.fused_kernel --compile-check")
    print(table(prediction, load_results(args.report)))
    print()
    print(per_score_table(load_results(args.report), tuple(args.sm), args.dropout))
    print()
    print(loop_table(load_results(args.report)))
    single = predict_one_pass(args.report)
    if single is not None:
        print()
        print(one_pass_table(single, prediction))


if __name__ == "__main__":
    main()
