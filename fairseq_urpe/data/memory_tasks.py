"""Wang & E (NeurIPS 2024), "Understanding the expressive power and mechanisms of Transformer for
sequence modeling": targets with memory, for causal models. Inputs ``x`` are (B, T, D) float, targets
``y`` (B, T) float; ``x_s = 0`` for ``s < 0``.

    fixed      y_t = sum_m x_{t - t_m}[0]                  fixed lags t_1..t_M (long ones included)
    adaptive   y_t = x_{s(t)}[0],  s(t) = the last s < t whose marker equals x_t's marker
               (the lag t - s(t) is chosen by the input; 0 where no earlier position matches)
    nested     y_t = x_{s(t)+1}[0]  (the same search, then one step forward: an induction head, which
               needs a previous-token layer below the matching one)
    exp        y_t = sum_{s=0..t} rho(s) x_{t-s}[0] / Z_t,  rho(s) = exp(-s / tau)
    poly       y_t = sum_{s=0..t} rho(s) x_{t-s}[0] / Z_t,  rho(s) = (1 + s)^(-alpha)
               Z_t = sum_{s=0..t} rho(s): a weighted average of the available past at every t. Wang & E
               take an infinite past, where Z is one constant; a finite sequence has a start, and this
               keeps the target a kernel *shape* question there (softmax also renormalises over t + 1 keys).
Channel 0 carries the value (standard normal); channels 1..K carry a one-hot marker (adaptive, nested).
"""

import numpy as np
import torch

MEMORY_TASKS = ("fixed", "adaptive", "nested", "exp", "poly")
DEFAULT_LAGS = (1, 8, 32)


def decay_kernel(task: str, length: int, tau: float = 4.0, alpha: float = 1.0) -> np.ndarray:
    """``rho(0..length-1)``, unnormalised."""
    s = np.arange(length, dtype=np.float64)
    return np.exp(-s / tau) if task == "exp" else (1.0 + s) ** (-alpha)


def lagged(values: np.ndarray, lag: int) -> np.ndarray:
    """(B, T) -> (B, T): ``values[:, t - lag]``, zero where ``t < lag``."""
    out = np.zeros_like(values)
    if lag < values.shape[1]:
        out[:, lag:] = values[:, : values.shape[1] - lag]
    return out


def memory_targets(task, values, markers=None, lags=DEFAULT_LAGS, tau=4.0, alpha=1.0):
    """Targets (B, T) from values (B, T) (and markers (B, T) ints for adaptive/nested), float64."""
    batch, length = values.shape
    if task == "fixed":
        return sum(lagged(values, lag) for lag in lags)
    if task in ("exp", "poly"):
        rho = decay_kernel(task, length, tau, alpha)
        return sum(rho[s] * lagged(values, s) for s in range(length)) / np.cumsum(rho)  # / Z_t
    if task in ("adaptive", "nested"):
        shift = 1 if task == "nested" else 0
        out = np.zeros_like(values)
        for b in range(batch):
            last = {}  # marker -> last position seen
            for t in range(length):
                s = last.get(markers[b, t])
                if s is not None and s + shift < length and s + shift <= t:
                    out[b, t] = values[b, s + shift]
                last[markers[b, t]] = t
        return out
    raise ValueError(f"memory task must be one of {', '.join(MEMORY_TASKS)}; got {task!r}")


def memory_batch(task, batch, length, markers=8, seed=0, **kw):
    """``(x (B, T, 1 + markers) float32, y (B, T) float32)``, deterministic per seed."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((batch, length))
    marks = rng.integers(0, markers, size=(batch, length))
    y = memory_targets(task, values, marks, **kw)
    x = np.zeros((batch, length, 1 + markers))
    x[..., 0] = values
    if task in ("adaptive", "nested"):
        x[..., 1:] = np.eye(markers)[marks]
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
