"""The attention-dropout rate the fused kernel runs, in plain Python (no torch, no triton).

The kernel draws 8 random bits per entry (Philox-4x32-7, 16 keys per call) and keeps an entry when its
uniform ``u in {0, ..., 255}`` is at least ``t = round(256 p)``: it drops at the rate ``t / 256``, not ``p``,
and scales kept entries by ``256 / (256 - t)``, so that ``E[Z] = 1`` exactly. For ``p = 0.1``: ``t = 26``,
rate 0.1016, scale 1.1130; ``p = 0.3``: ``t = 77``, rate 0.3008, scale 1.4302.

A rate more than :data:`RELATIVE_TOLERANCE` (10%) from ``p`` is one the kernel does not run: ``p = 0.001``
would be 0 (no dropout), ``p = 0.01`` would be 3 / 256 = 0.0117. Below about 0.02 most rates are such; the
dispatch sends them to the dense path (``auto``) or refuses them (``fused``), and the kernel raises.
"""

from typing import Optional, Tuple

RANDOM_BITS = 8
LEVELS = 2 ** RANDOM_BITS
RELATIVE_TOLERANCE = 0.1


def keep_threshold(p: float) -> int:
    """``t = round(256 p)``: entries whose 8-bit uniform is below ``t`` are dropped."""
    return int(round(p * LEVELS))


def effective_rate(p: float) -> float:
    """The drop rate the kernel runs for ``p``: ``round(256 p) / 256``."""
    return keep_threshold(p) / LEVELS


def keep_scale(p: float) -> float:
    """The scale of kept entries, ``256 / (256 - t)``: the inverse of the keep rate."""
    return LEVELS / (LEVELS - keep_threshold(p))


def dropout_keep(p: float) -> Tuple[int, float]:
    """``(threshold, scale)`` the kernels take for rate ``p`` (see the module doc); raises ``ValueError``
    naming the rate where the kernel does not run it (:func:`rate_problem`)."""
    problem = rate_problem(p)
    if problem is not None:
        raise ValueError(f"dropout_p: {problem}")
    return keep_threshold(p), keep_scale(p)


def describe(p: float) -> str:
    """``attention dropout 0.1 runs at 26/256 = 0.1016, kept entries x 1.1130``."""
    t = keep_threshold(p)
    return f"attention dropout {p:g} runs at {t}/{LEVELS} = {t / LEVELS:.4f}, kept entries x {keep_scale(p):.4f}"


def rate_problem(p: float) -> Optional[str]:
    """Why the kernel does not run attention dropout at rate ``p`` (``None`` where it does: ``p = 0``, or
    the 8-bit rate within 10% of ``p`` and below 1)."""
    if not 0.0 <= p < 1.0:
        return f"attention dropout {p} is not in [0, 1)"
    if p == 0.0:
        return None
    t = keep_threshold(p)
    if t >= LEVELS:
        return f"attention dropout {p} rounds to dropping everything at the kernel's {RANDOM_BITS}-bit resolution"
    if abs(t / LEVELS - p) > RELATIVE_TOLERANCE * p:
        return (f"attention dropout {p:g} (--attention-dropout) would run at {t}/{LEVELS} = {t / LEVELS:.4g} at the "
                f"kernel's {RANDOM_BITS}-bit resolution, more than {RELATIVE_TOLERANCE:.0%} from the rate asked")
    return None
