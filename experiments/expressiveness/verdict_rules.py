"""The rules every Wang & E study reads its verdicts by: failed optimisation, a cell's figure, ties, flat curves.

A verdict is one of five words:

    reproduced                          the claim's direction, by the study's rule
    contradicted                        the opposite, by the same rule
    not separable by this instance      the rule cannot tell the arms apart: both reach the threshold at the same
                                        point of the grid, neither reaches it, or a ratio falls between the bounds
    inconclusive (under-trained)        an arm the rule reads is still learning at the study's budget: its
                                        validation error still changes by 1% or more over the last 10% of steps
    inconclusive (failed optimisation)  a cell the rule reads has fewer than MIN_LIVE live seeds after every batch
                                        of SEED_BATCHES

**Failed optimisation.** A run whose read-out died predicts a constant: its relative error (MSE / Var y) is above
DEAD_RELATIVE and its predictions spread less than DEAD_SPREAD of the target's standard deviation. It is reported
as such and counted per cell, never averaged in. A model that varies its output but explains little (a kernel
that cannot isolate the lag) is live: that is a result, not a failed optimisation.

**A cell's figure** is the median over its live seeds, with the count of live and dead seeds beside it. A cell
trains SEED_BATCHES[0]; while it has fewer than MIN_LIVE live seeds it trains the next batch.
"""

import math
import statistics
from typing import Dict, List, Optional, Sequence

DEAD_RELATIVE, DEAD_SPREAD = 0.99, 0.01
MIN_LIVE = 3
SEED_BATCHES = ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9), (10, 11, 12, 13, 14))
FLAT_CHANGE, FLAT_WINDOW, FLAT_POINTS = 0.01, 0.1, 3
# A power law error ~ step^a falls by 0.9^a - 1 of its level over the last 10% of steps: it passes `flat` only for
# a above about ln(1.01) / ln(0.9) = -0.094.
FLAT_EXPONENT = math.log(1 + FLAT_CHANGE) / math.log(1 - FLAT_WINDOW)
TAIL = 0.5

REPRODUCED, CONTRADICTED, TIE = "reproduced", "contradicted", "not separable by this instance"
UNDER_TRAINED, FAILED = "inconclusive (under-trained)", "inconclusive (failed optimisation)"
WORDS = (REPRODUCED, CONTRADICTED, TIE, UNDER_TRAINED, FAILED)


def dead(relative: float, spread: Optional[float]) -> bool:
    """A dead read-out: relative error above DEAD_RELATIVE with predictions spread below DEAD_SPREAD of the
    target's standard deviation (``spread``: std of the predictions / std of the target)."""
    return relative > DEAD_RELATIVE and spread is not None and spread < DEAD_SPREAD


def cell(errors: Sequence[float], dead_flags: Sequence[bool]) -> Dict:
    """A cell's figure: the median over its live seeds (``figure``: None with fewer than MIN_LIVE), the live
    seeds' range, and the counts."""
    live = sorted(e for e, d in zip(errors, dead_flags) if not d)
    return {"figure": statistics.median(live) if len(live) >= MIN_LIVE else None,
            "median_live": statistics.median(live) if live else None,
            "low": live[0] if live else None, "high": live[-1] if live else None,
            "n": len(errors), "live": len(live), "dead": len(errors) - len(live)}


def next_seeds(trained: Sequence[int], live: int) -> List[int]:
    """The seeds a cell trains next: the first batch of SEED_BATCHES not yet trained while it has fewer than
    MIN_LIVE live seeds (the first batch always); none once it has enough or every batch is spent."""
    done = set(trained)
    for batch in SEED_BATCHES:
        if not set(batch) <= done:
            return [s for s in batch if s not in done] if (batch == SEED_BATCHES[0] or live < MIN_LIVE) else []
    return []


def fmt_cell(c: Dict, digits: int = 3) -> str:
    """``median [low, high] (k/n live)``, or the dead count alone."""
    if c["live"] == 0:
        return f"dead ({c['dead']}/{c['n']})"
    text = f"{c['median_live']:.{digits}g} [{c['low']:.2g}, {c['high']:.2g}]" if c["live"] > 1 else f"{c['median_live']:.{digits}g}"
    return text + f" ({c['live']}/{c['n']} live)"


def fewer_heads(needed_good: Optional[int], needed_bad: Optional[int]) -> str:
    """"The kind that should win needs fewer heads": reproduced if it reaches the threshold at a smaller H than
    the other (or the other never does), contradicted if the other does at a smaller H, a tie (the same H, or
    neither) not separable."""
    if needed_good == needed_bad:
        return TIE
    if needed_bad is None or (needed_good is not None and needed_good < needed_bad):
        return REPRODUCED
    return CONTRADICTED


def heads_needed(curve: Dict, threshold: float) -> Optional[int]:
    """The smallest H of ``curve`` ({H: error}) whose error is <= threshold, or None."""
    reached = [int(h) for h, e in curve.items() if e is not None and e <= threshold]
    return min(reached) if reached else None


def effect(before: Optional[float], after: Optional[float], helps: float = 10.0, barely: float = 2.0,
           fail: float = 0.5) -> Optional[str]:
    """What a change of setting does to a relative error: ``helps`` (lowers it ``helps``-fold or more, to below
    ``fail``), ``barely`` (less than ``barely``-fold, where at least one side learns: below ``fail``), ``neither``
    (both sides at or above ``fail``: the instance cannot show the change), or ``between``. None if a side is
    missing."""
    if before is None or after is None:
        return None
    if before >= fail and after >= fail:
        return "neither"
    ratio = before / after if after > 0 else math.inf
    if ratio >= helps and after < fail:
        return "helps"
    if ratio < barely:
        return "barely"
    return "between"


def flat(curve: Sequence[Sequence[float]]) -> Optional[bool]:
    """Whether a validation curve ``[(step, error), ...]`` has flattened: the least-squares line through its
    points in the last FLAT_WINDOW of steps (at least FLAT_POINTS of them) changes by less than FLAT_CHANGE of its
    level over that window. None with too few points."""
    if not curve:
        return None
    last = curve[-1][0]
    window = [(s, e) for s, e in curve if s >= (1 - FLAT_WINDOW) * last]
    if len(window) < FLAT_POINTS:
        return None
    xs, ys = [s for s, _ in window], [e for _, e in window]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    level = abs(my) or 1e-300
    return abs(slope * (xs[-1] - xs[0])) < FLAT_CHANGE * level


def tail_exponent(curve: Sequence[Sequence[float]], tail: float = TAIL) -> Optional[float]:
    """The exponent ``a`` of ``error ~ step^a`` that a validation curve ``[(step, error), ...]`` follows over its
    last ``tail`` of steps: the least-squares slope of log error on log step. Not a rule: it reads how far a curve
    that is not flat is from the flatness test (FLAT_EXPONENT). None with fewer than FLAT_POINTS points there or an
    error that is not positive."""
    if not curve:
        return None
    last = curve[-1][0]
    window = [(s, e) for s, e in curve if s >= (1 - tail) * last]
    if len(window) < FLAT_POINTS or any(s <= 0 or e <= 0 for s, e in window):
        return None
    xs, ys = [math.log(s) for s, _ in window], [math.log(e) for _, e in window]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


RULE_TEXT = {
    "failed optimisation": f"a run is dead when its relative error is above {DEAD_RELATIVE} and its predictions "
                           f"spread less than {DEAD_SPREAD} of the target's std; a cell's figure is the median over its "
                           f"live seeds (counts beside it); a cell trains seeds {SEED_BATCHES[0]} and, while it has "
                           f"fewer than {MIN_LIVE} live seeds, the next batch of {SEED_BATCHES[1:]}; a verdict that reads "
                           f"a cell still short of {MIN_LIVE} live seeds is '{FAILED}'",
    "ties": f"a tie (the same H, neither arm reaching the threshold, or a ratio between the bounds) is '{TIE}'",
    "flat": f"a curve is flat when the least-squares line through its validation points in the last "
            f"{FLAT_WINDOW:.0%} of steps changes by less than {FLAT_CHANGE:.0%} of its level; a verdict that "
            f"needs an arm to stay above a floor, or reads an arm that has not reached the threshold, while that "
            f"arm's curve is not flat at the budget is '{UNDER_TRAINED}'",
}
# When each shared rule was written, relative to the results it judges (git holds the commits).
RULE_WRITTEN = {
    "failed optimisation": "after the first results of the three studies were known (they averaged dead "
                           "read-outs into 3-seed means)",
    "ties": "after the first results of the three studies were known",
    "flat": "after the first trained memory models were known (1000 steps, 3 seeds: no model below 0.1)",
}
