"""The best error each position class of Wang & E's tables 3-6 can reach, computed rather than trained.

    python -m experiments.expressiveness.class_ceilings            # -> docs/expressiveness/class_ceilings.{md,json}
    python -m experiments.expressiveness.class_ceilings --smoke    # seconds: every code path, few restarts
    python -m experiments.expressiveness.class_ceilings --no-fit   # the tables again from class_ceilings.json

Setting (``appendix_h``): inputs uniform on ``{+1, -1}^N``, ``N = 1000``, the output at the last position; the
targets of tables 3-5 are functions of ``x_48, x_56, x_99`` (lags from the output). On ``{+1, -1}^3`` a target
is exactly its Walsh expansion ``y = c_0 + sum_i c_i x_{l_i} + (terms of degree 2 and 3)``; the first-degree
part carries ``sum_i c_i^2`` of ``Var y``, the rest ``V_hi = Var y - sum_i c_i^2`` (``walsh``).

A dot-product-free head outputs ``z_h = sum_l k_h(l) x_{t-l}`` with ``k_h`` a softmax over the lags; the read-out
sees ``x_t`` (the residual) and the ``z_h`` through a linear map, then its ReLUs. Per class (errors relative to
``Var y``):

- ``lin``, ``log`` (``p_h phi(l)``): **the best read-out affine in (x_t, z_1..z_H)**. Its MSE is
  ``min_a ||c - K(p) a||^2 + V_hi`` with ``c`` the first-degree coefficients by lag and ``K(p) = [e_0, k_1 .. k_H]``
  (N, 1 + H): exact least squares in ``a`` (SVD, ``gelsd``), minimised over the slopes ``p`` by L-BFGS from 8
  log-uniform starts and a warm start from the next smaller H (``memory_claims.fit_curve``). Each figure is the
  error of a kernel of the class, so an upper bound on the affine read-out's best. The conditioning is given
  beside it: ``cond(K)`` at the slopes found, and the error with the basis's singular directions below float32's
  epsilon dropped (``float32_relative``: what amplitudes a float32 model can resolve reach with those slopes).
  A read-out non-linear in ``z`` is not bounded by this: with a lin
  head of ``p > ln 2`` the sum ``z`` determines every ``x_l`` in exact arithmetic (a binary expansion), but
  reading ``x_48`` out of it means resolving ``e^{-48 p} < 4e-15`` of the head's output, below float32's 6e-8
  (``lin_resolution``).
- ``t5`` (one bias per bucket, 32 causal buckets up to distance 128): a head's kernel is constant on each bucket,
  so every head output is a combination of the bucket sums ``S_b`` and, with a head per bucket the target reads
  (3 at most), the read-out can see ``S_b / n_b`` of each. **The best read-out of any form** is then the
  conditional expectation ``E[y | S]``, exact by enumeration: given ``S_b``, ``P(x_l = 1) = (1 + S_b / n_b) / 2``
  (exchangeability) and the buckets are independent. One head reaches the same for ``relu1`` (one bucket) and for
  ``sum3`` (``E[y | S]`` is linear: one head with weights ``1 / n_b`` on the three buckets). The affine read-out's
  figure ``1 - sum_i c_i^2 / n_{b(i)} / Var y`` is given too.
- ``learned`` (a free bias per lag): 0, the infimum: three heads whose bias grows at lags 48, 56, 99 approach
  ``x_48, x_56, x_99`` themselves, and each target is a ReLU read-out of those of width <= 64 (``relu1`` and
  ``sum3``: 2 ReLUs, since ``relu1`` is affine in ``x_99`` on +-1 inputs).

A read-out of width ``m`` can only do worse than an unbounded one: the ceilings do not depend on ``m``.
"""

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

TARGETS = {"3": "relu3", "4": "relu1", "5": "sum3"}  # table 6 reads table 3's target
HEADS = (1, 32)  # the H of the cells of tables 3-6
FIT_GRID = (1, 2, 4, 8, 16, 32)  # warm starts along this grid; HEADS read off it
SMOKE = dict(restarts=1, iters=5, grid=(1, 2), length=200)
FLOAT32_RCOND = 2.0 ** -23  # float32's machine epsilon: singular directions below it are not resolvable there


def walsh(name, lags=(48, 56, 99)):
    """``{"c0", "linear" [c_i per lag of ``lags``], "var", "v_hi"}`` of an Appendix H target on {+1, -1}^3,
    exact by enumerating the 8 sign patterns."""
    import torch

    from experiments.expressiveness.appendix_h import target

    n = max(lags) + 1
    patterns = torch.tensor(list(itertools.product((1.0, -1.0), repeat=len(lags))), dtype=torch.float64)  # (8, 3)
    x = torch.ones(len(patterns), n, dtype=torch.float64)
    for i, lag in enumerate(lags):
        x[:, n - 1 - lag] = patterns[:, i]
    y = target(name, x, lags)  # (8,)
    c0 = float(y.mean())
    linear = [float((y * patterns[:, i]).mean()) for i in range(len(lags))]
    var = float(((y - c0) ** 2).mean())
    return {"c0": c0, "linear": linear, "var": var, "v_hi": var - sum(c * c for c in linear),
            "values": y.tolist(), "patterns": patterns.tolist()}


def bucket_sizes(length, lags):
    """``[n_b]`` per lag of ``lags``: how many lags ``0 .. length-1`` share its T5 bucket (distinct buckets
    required)."""
    import torch

    from experiments.expressiveness.last_row import t5_buckets

    buckets = t5_buckets(torch.arange(length))
    chosen = [int(buckets[lag]) for lag in lags]
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"lags {lags} share a T5 bucket; the enumeration assumes one lag per bucket")
    return [int((buckets == b).sum()) for b in chosen]


def t5_bayes(w, sizes):
    """``E[(y - E[y | S])^2]`` where ``S_i`` is the sum of the ``n_i`` +-1 inputs of target lag i's bucket: the
    best read-out of any form from T5 heads. Exact: ``S_i = x_i + R_i``, ``R_i`` a sum of ``n_i - 1`` signs."""
    patterns, values = w["patterns"], w["values"]
    explained = 0.0  # E[E[y|S]^2]
    supports = []
    for n in sizes:
        # S = 2j - n for j heads of n (binomial), P(S) = C(n, j) / 2^n
        supports.append([(2 * j - n, math.comb(n, j) / 2**n) for j in range(n + 1)])
    for combo in itertools.product(*supports):
        prob = math.prod(p for _, p in combo)
        up = [(1 + s / n) / 2 for (s, _), n in zip(combo, sizes)]  # P(x_i = +1 | S_i)
        mean = sum(v * math.prod(u if sign > 0 else 1 - u for u, sign in zip(up, pattern))
                   for v, pattern in zip(values, patterns))
        explained += prob * mean * mean
    second = sum(v * v for v in values) / len(values)  # E[y^2]
    return second - explained


def lin_resolution(lag=48):
    """The share of a lin head's output that ``x_lag`` holds when the head's sum is a binary expansion
    (``p = ln 2``, weights ``2^{-l}``): ``2^{-lag}``, an upper bound over every ``p > ln 2``."""
    return 2.0 ** -lag


def first_degree_vector(w, length, lags):
    """``c`` (N,) float64: the first-degree Walsh coefficient of each lag (zero off the target lags)."""
    import torch

    c = torch.zeros(length, dtype=torch.float64)
    for coef, lag in zip(w["linear"], lags):
        c[lag] = coef
    return c


def float32_relative(kind, slopes, w, length, lags, rcond=FLOAT32_RCOND):
    """The affine read-out's relative error at ``slopes`` with the basis's singular directions below ``rcond``
    times the largest dropped (truncated SVD): what amplitudes resolvable at float32's precision reach with these
    slopes (not re-optimised over the slopes, so a bound from above on that)."""
    import torch

    from experiments.expressiveness.memory_claims import kernel_basis

    c = first_degree_vector(w, length, lags)
    basis = kernel_basis(kind, torch.tensor(slopes, dtype=torch.float64), length)
    u, sv, _ = torch.linalg.svd(basis, full_matrices=False)
    kept = u[:, sv > rcond * sv[0]]
    residual = c - kept @ (kept.T @ c)
    return (float((residual**2).sum()) + w["v_hi"]) / w["var"]


def affine_ceiling(kind, w, length, lags, size):
    """``{H: {"relative", "cond", "slopes"}}`` on ``size["grid"]``: the best read-out affine in (x_t, z_h) with
    ``kind`` heads (memory_claims.fit_curve on the first-degree coefficients), plus ``V_hi``."""
    import torch

    from experiments.expressiveness.memory_claims import best_fit, kernel_basis

    c = first_degree_vector(w, length, lags)
    energy = float((c**2).sum())
    out, best = {}, None
    for h in sorted(size["grid"]):
        found = best_fit(kind, h, c, torch.ones_like(c), size["restarts"], size["iters"],
                         warm=best[2] if best else None)
        if best is None or found[0] <= best[0]:
            best = found
        error, _, log_slopes = best
        slopes = torch.exp(log_slopes)
        basis = kernel_basis(kind, slopes, length)
        sv = torch.linalg.svdvals(basis)
        out[h] = {"relative": (error * energy + w["v_hi"]) / w["var"],
                  "cond": float(sv[0] / sv[-1]) if float(sv[-1]) > 0 else math.inf,
                  "heads_used": int(slopes.numel()), "slopes": sorted(slopes.tolist())}
        out[h]["float32"] = float32_relative(kind, out[h]["slopes"], w, length, lags)
    return out


def compute(size):
    import torch

    torch.set_num_threads(1)
    start = time.time()
    length, lags = size["length"], size["lags"]
    out = {"length": length, "lags": list(lags), "restarts": size["restarts"], "iters": size["iters"],
           "lin_resolution_48": lin_resolution(48), "targets": {}}
    sizes = bucket_sizes(length, lags)
    out["t5_bucket_sizes"] = sizes
    for table, name in TARGETS.items():
        w = walsh(name, lags)
        entry = {"table": table, "var": w["var"], "first_degree_share": 1 - w["v_hi"] / w["var"],
                 "t5_any": t5_bayes(w, sizes) / w["var"],
                 "t5_affine": 1 - sum(c * c / n for c, n in zip(w["linear"], sizes)) / w["var"],
                 "learned": 0.0}
        for kind in ("lin", "log"):
            entry[kind] = {str(h): v for h, v in affine_ceiling(kind, w, length, lags, size).items()}
        out["targets"][name] = entry
    out["seconds"] = time.time() - start
    return out


def ceiling_cells(ceilings, name, kind, heads):
    """The ceiling figure of one appendix_h cell (``kind``, ``heads``) as text, or None."""
    entry = ceilings["targets"].get(name)
    if entry is None:
        return None
    if kind == "learned":
        return "0 (infimum)"
    if kind == "t5":
        return f"{entry['t5_any']:.3f} (any read-out)"
    cell = entry.get(kind, {}).get(str(heads))
    return None if cell is None else f"{cell['relative']:.3f} (affine read-out; float32: {cell['float32']:.3f})"


def markdown(c):
    lines = [f"Ceilings of tables 3-6 at length {c['length']} (lags {', '.join(map(str, c['lags']))}): relative error "
             f"MSE / Var y of the best read-out each class allows; T5 bucket sizes of the target lags "
             f"{', '.join(map(str, c['t5_bucket_sizes']))}; lin/log slopes by L-BFGS, {c['restarts']} random starts "
             f"and a warm start per H, {c['iters']} iterations each; {c['seconds']:.0f} s.", "",
             "| target | tables | first-degree share of Var y | lin, H=1 | lin, H=32 | log, H=1 | log, H=32 | "
             "T5 (any read-out) | T5 (affine read-out) | free bias |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, e in c["targets"].items():
        def cell(kind, h):
            v = e[kind].get(str(h))
            return f"{v['relative']:.4f} (cond {v['cond']:.1e}; float32: {v['float32']:.4f})" if v else "–"
        tables = "3, 6" if name == "relu3" else e["table"]
        lines.append(f"| `{name}` | {tables} | {e['first_degree_share']:.4f} | {cell('lin', 1)} | {cell('lin', 32)} | "
                     f"{cell('log', 1)} | {cell('log', 32)} | {e['t5_any']:.4f} | {e['t5_affine']:.4f} | 0 (infimum) |")
    lines += ["", "lin, log: the best read-out affine in the heads' outputs (exact least squares over the amplitudes, "
              "slopes optimised; cond: condition number of [e_0, k_1 .. k_H] at the slopes found; float32: the same "
              "slopes with the singular directions below float32's epsilon dropped). T5: the "
              "conditional expectation given the bucket sums (exact enumeration), and the affine read-out's figure. "
              f"A non-linear read-out of a lin head would have to resolve at most {c['lin_resolution_48']:.1e} of the "
              "head's output to read x_48."]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--no-fit", action="store_true", help="rewrite the table from OUT/class_ceilings.json")
    p.add_argument("--out", default="docs/expressiveness")
    a = p.parse_args(argv)
    from experiments.expressiveness.appendix_h import LAGS, LENGTH
    from experiments.expressiveness.memory_claims import FIT_ITERS, RESTARTS

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "class_ceilings.json"
    if a.no_fit:
        c = json.loads(path.read_text())
    else:
        size = (dict(SMOKE, lags=LAGS) if a.smoke
                else dict(restarts=RESTARTS, iters=FIT_ITERS, grid=FIT_GRID, length=LENGTH, lags=LAGS))
        c = compute(size)
        path.write_text(json.dumps(c, indent=1) + "\n")
    text = markdown(c)
    print(text)
    (out / "class_ceilings.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
