"""Wang & E (NeurIPS 2024, arXiv 2402.00522): sequence-to-sequence targets with memory, for causal models.

Inputs ``x`` (B, T, D) are i.i.d. ``U(-sqrt 3, sqrt 3)`` (mean 0, variance 1; the paper takes inputs from a
compact set), and ``x_s = 0`` for ``s < 0``: the sequence starts at 0 where the paper's past is infinite.
Channel 0 holds the value a memory reads, channel 1 a selector through which adaptive memories choose
their lags; ``k(x) in {0..K-1}`` is the bin of ``x[1]`` among ``K`` bins of equal probability.

    fixed      y_t = x_{t-T_1}[0] + ... + x_{t-T_M}[0]            memory at fixed lags ``lags`` (the paper's
                                                                  fixed, long but M-sparse memory, f = sum)
    adaptive   y_t = x_{t-g(x_t)}[0],  g(x) = lags[k(x)]           the lag is chosen by the current input
                                                                  (adaptive memory, t_1 = g(x_t))
    nested     y_t = x_{t-t_2}[0],  t_1 = lags[k(x_t)],            the second lag is chosen by the token the
               t_2 = lags2[k(x_{t-t_1})]                          first one points at (t_2 = g_2(x_t, x_{t-t_1}))
    kernel     y_t = sum_{s=0..t} rho(s) x_{t-s}[0]                essentially sparse memory: a convolution with a
                                                                  decaying kernel, not renormalised
               rho = "exp":  (1 + s/scale) e^{-s/scale}            exponential decay, but no single e^{-m s}
               rho = "poly": (1 + s/scale)^{-alpha}                polynomial decay, but no single (1 + s)^{-m}
    content    y_t = x_{s(t)}[0], s(t) = the last s < t whose      a control, not one of the paper's families:
               marker (one-hot, channels 2..) equals x_t's         the position is found by matching contents
               (0 if there is none)
"""

import numpy as np
import torch

MEMORY_TASKS = ("fixed", "adaptive", "nested", "kernel", "content")
KERNELS = ("exp", "poly")
LIMIT = 3.0 ** 0.5  # U(-LIMIT, LIMIT) has variance 1


def decay_kernel(kind: str, length: int, scale: float = 4.0, alpha: float = 1.5) -> np.ndarray:
    """``rho(0 .. length-1)``: ``(1 + s/scale) e^{-s/scale}`` ("exp") or ``(1 + s/scale)^-alpha`` ("poly")."""
    s = np.arange(length, dtype=np.float64) / scale
    if kind == "exp":
        return (1.0 + s) * np.exp(-s)
    if kind == "poly":
        return (1.0 + s) ** (-alpha)
    raise ValueError(f"kernel must be one of {', '.join(KERNELS)}; got {kind!r}")


def lagged(values: np.ndarray, lag) -> np.ndarray:
    """(B, T) -> (B, T): ``values[:, t - lag]``, zero where ``t < lag``; ``lag`` an int or a (B, T) int array."""
    batch, length = values.shape
    t = np.arange(length)
    source = t - np.asarray(lag)  # (T,) or (B, T)
    picked = np.take_along_axis(values, np.broadcast_to(np.clip(source, 0, None), (batch, length)), axis=1)
    return np.where(source >= 0, picked, 0.0)


def selector_bins(selector: np.ndarray, count: int) -> np.ndarray:
    """Bin ``0 .. count-1`` of each ``U(-LIMIT, LIMIT)`` selector value, bins of equal probability."""
    return np.clip(((selector + LIMIT) / (2 * LIMIT) * count).astype(np.int64), 0, count - 1)


def memory_targets(task, x, lags=(8,), lags2=(1, 2), kernel="poly", scale=4.0, alpha=1.5):
    """Targets (B, T) float64 of ``task`` from inputs ``x`` (B, T, D) float64 (see the module docstring)."""
    values = x[..., 0]
    if task == "fixed":
        return sum(lagged(values, lag) for lag in lags)
    if task == "adaptive":
        return lagged(values, np.asarray(lags)[selector_bins(x[..., 1], len(lags))])
    if task == "nested":
        first = np.asarray(lags)[selector_bins(x[..., 1], len(lags))]  # t_1 (B, T)
        selector_there = lagged(x[..., 1], first)  # x_{t - t_1}[1]; 0 before the start, a valid middle bin
        second = np.asarray(lags2)[selector_bins(selector_there, len(lags2))]  # t_2 (B, T)
        return lagged(values, second)
    if task == "kernel":
        rho = decay_kernel(kernel, values.shape[1], scale, alpha)
        return sum(rho[s] * lagged(values, s) for s in range(values.shape[1]))
    if task == "content":
        markers = x[..., 2:].argmax(-1)  # (B, T)
        out = np.zeros_like(values)
        for b in range(values.shape[0]):
            last = {}  # marker -> last position seen
            for t in range(values.shape[1]):
                s = last.get(markers[b, t])
                if s is not None:
                    out[b, t] = values[b, s]
                last[markers[b, t]] = t
        return out
    raise ValueError(f"memory task must be one of {', '.join(MEMORY_TASKS)}; got {task!r}")


def memory_batch(task, batch, length, seed=0, markers=8, **params):
    """``(x (B, T, D) float32, y (B, T) float32)``, deterministic per seed; ``D = 2`` (value, selector),
    ``2 + markers`` for the content control. ``params`` go to :func:`memory_targets`."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-LIMIT, LIMIT, size=(batch, length, 2))
    if task == "content":
        x = np.concatenate([x, np.eye(markers)[rng.integers(0, markers, size=(batch, length))]], axis=-1)
    y = memory_targets(task, x, **params)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
