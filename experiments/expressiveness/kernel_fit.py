"""The best a one-layer dot-product-free model can do on a fixed memory ``y_t = x_{t-T}``, by direct fit.

Without an FFN the model of ``memory_model.py`` is linear: for unit-variance white-noise inputs its relative
error is exactly the squared distance between its kernel and the target's,

    E = sum_{t in P} sum_{k=0..t} (c [k = 0] + sum_h a_h A_h(t, k) - [k = T])^2 / |P|,
    A_h(t, k) = exp(b_h(k)) / sum_{j=0..t} exp(b_h(j))            (softmax over the t + 1 visible keys)

over the scored positions ``P = T .. T+31``, with ``b_h`` from the plugin's ``ALiBiBias`` (lin) or
``LogBias`` (log) and ``c`` the residual path. For given slopes the amplitudes ``(c, a)`` are a linear
least-squares problem, solved exactly; the slopes are then optimised (float64, L-BFGS) from ``restarts``
random starts. The smallest error found bounds what training can reach with H heads (from above: a
better optimum may exist), and separates what the family can represent from what Adam finds.
"""

import math

import torch

from fairseq_urpe.modules import ALiBiBias, LogBias

FIT_RANGES = {"lin": (1 / 256, 4.0), "log": (1 / 16, 16.0)}  # wider than the trained models' neutral start


def fixed_memory_error(kind, slopes, lag, positions=32):
    """Relative error of the best amplitudes for ``slopes`` (H,) float64 on ``y_t = x_{t-lag}``."""
    heads = slopes.numel()
    if kind == "lin":
        bias = ALiBiBias(heads, learnable=True).double()
        bias.slopes = torch.nn.Parameter(slopes)  # unconstrained, as in training
    else:
        bias = LogBias(heads, learnable=True).double()
        bias.rho = torch.nn.Parameter(torch.log(torch.expm1(slopes.clamp(min=1e-6))))
    length = lag + positions
    b = bias.by_distance(torch.arange(length))  # (H, L): b_h(k), k = 0 .. L-1
    rows, targets = [], []
    for t in range(lag, length):
        kernel = torch.softmax(b[:, : t + 1], dim=-1)  # (H, t+1)
        direct = torch.zeros(1, t + 1, dtype=torch.float64)
        direct[0, 0] = 1.0
        rows.append(torch.cat([direct, kernel]).T)  # (t+1, 1+H): the model's kernel basis at this position
        target = torch.zeros(t + 1, dtype=torch.float64)
        target[lag] = 1.0
        targets.append(target)
    basis, target = torch.cat(rows), torch.cat(targets)  # (N, 1+H), (N,)
    amplitudes = torch.linalg.lstsq(basis, target[:, None]).solution  # (1+H, 1)
    return ((basis @ amplitudes).squeeze(1) - target).pow(2).sum() / positions


def best_fit(kind, heads, lag, restarts=12, seed=0):
    """Smallest relative error found for ``heads`` heads of ``kind`` on lag ``lag``."""
    generator = torch.Generator().manual_seed(seed)
    low, high = FIT_RANGES[kind]
    best = math.inf
    for _ in range(restarts):
        u = torch.rand(heads, generator=generator, dtype=torch.float64)
        log_slopes = (math.log(low) + u * (math.log(high) - math.log(low))).requires_grad_()
        # lin slopes may turn negative in training; here lin optimises m itself, log optimises log m (> 0)
        params = torch.exp(log_slopes).detach().requires_grad_() if kind == "lin" else log_slopes
        optimiser = torch.optim.LBFGS([params], max_iter=60, line_search_fn="strong_wolfe")

        def closure():
            optimiser.zero_grad()
            error = fixed_memory_error(kind, params if kind == "lin" else torch.exp(params), lag)
            error.backward()
            return error

        try:
            optimiser.step(closure)
        except RuntimeError:  # a singular least-squares step: keep what was reached
            pass
        with torch.no_grad():
            error = fixed_memory_error(kind, params if kind == "lin" else torch.exp(params), lag).item()
        if math.isfinite(error):
            best = min(best, error)
    return best
