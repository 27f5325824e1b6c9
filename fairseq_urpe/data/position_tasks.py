"""The URPE paper's synthetic tasks (Luo et al., NeurIPS 2022, section 5.1), on raw token ids.

    Even Token Prediction (ETP):    y_i = x_{2i+1}   for i < n/2,   y_i = FILLER  for i >= n/2
    Position Identification (PI):   y_i = i

Inputs ``x`` are ``n`` tokens drawn uniformly from ``0..vocab_size-1``. Targets use the same ids plus
``FILLER = -1`` (ETP's fixed filler, which no input carries); a task maps them to its dictionary.
Each example depends only on ``(seed, split, index)``, so a split is deterministic and lazily generated.
"""

import numpy as np

POSITION_TASKS = ("etp", "pi")
FILLER = -1
SPLIT_STREAMS = {"train": 0, "valid": 1, "test": 2}


def etp_targets(tokens: np.ndarray) -> np.ndarray:
    """(..., n) -> (..., n): the token at 2i+1 for the first half (i < n/2), FILLER after."""
    n = tokens.shape[-1]
    targets = np.full_like(tokens, FILLER)
    # x_{2i+1} exists for i < n/2 when n is even; for odd n the last i < n/2 has no 2i+1 and keeps FILLER
    targets[..., : n // 2] = tokens[..., 1::2][..., : n // 2]  # x_1, x_3, ...
    return targets


def pi_targets(tokens: np.ndarray) -> np.ndarray:
    """(..., n) -> (..., n): position i at position i."""
    return np.broadcast_to(np.arange(tokens.shape[-1], dtype=tokens.dtype), tokens.shape).copy()


TARGETS = {"etp": etp_targets, "pi": pi_targets}


def position_example(task: str, vocab_size: int, seq_len: int, seed: int, split: str, index: int):
    """``(tokens (n,), targets (n,))`` of example ``index`` of ``split``; int64 ids, FILLER = -1."""
    if task not in TARGETS:
        raise ValueError(f"--synthetic-task must be one of {', '.join(POSITION_TASKS)}; got {task!r}")
    stream = SPLIT_STREAMS.get(split, 3 + sum(map(ord, split)))  # other split names: their own stream
    rng = np.random.default_rng([seed, stream, index])
    tokens = rng.integers(0, vocab_size, size=seq_len, dtype=np.int64)
    return tokens, TARGETS[task](tokens)
