"""The position options, one declaration each: :data:`POSITION_OPTIONS`, by config field name.

A declaration holds what the rest is written from: the config field and its flag, its default, choices
and help (``relative_position_config`` writes the dataclass fields from them), the constructor keyword
it becomes in the modules that read it (the kinds of ``position_kinds`` and URPE's ``C`` of
``reweightings`` name the options they read), what it sets (the refusal of an option nothing reads:
"--rpe-kind alibi has no slopes"), whether it sizes a learned table, and whether a checkpoint records
it (it changes the function the weights compute).
"""

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from .reweightings import REWEIGHTINGS


def flag(option: str) -> str:
    """The command-line flag of a config field: ``rpe_max_distance`` -> ``--rpe-max-distance``."""
    return "--" + option.replace("_", "-")


@dataclass(frozen=True)
class PositionOption:
    """One option. field: its config field (``rpe_max_distance``; the flag is :func:`flag` of it); default
    (``None``: not given, where a kind may give its own); choices (``None``: ``type``'s values); help: the
    flag's help, ``{readers}`` standing for the kinds that read it and ``{kind_defaults}`` for their own
    defaults, ``{kinds}`` for every kind with its description; keyword: the constructor keyword it becomes
    (``None``: it selects a kind or ``C`` and is passed to no module); to_keyword: its value -> the
    keyword's value (``str`` of a choice; ``rpe_slopes``: ``learnable``, a bool); sets: what it sets, for
    the error where nothing reads it; sizes: ``"buckets"`` or ``"distances"`` where it sizes a learned
    table (an entry per bucket, or per distance up to it); recorded: a checkpoint records it."""

    field: str
    default: object
    help: str
    type: type = str
    choices: Optional[Tuple[str, ...]] = None
    keyword: Optional[str] = None
    to_keyword: Optional[Callable[[object], object]] = None
    sets: str = "use for it"
    sizes: Optional[str] = None
    recorded: bool = False

    @property
    def flag(self) -> str:
        return flag(self.field)

    def argument(self, value):
        """``value`` as the keyword argument of a module that reads the option."""
        if self.to_keyword is not None:
            return self.to_keyword(value)
        return str(value) if self.choices is not None and value is not None else value


POSITION_OPTIONS: Dict[str, PositionOption] = {option.field: option for option in (
    PositionOption(
        "rpe_kind", "t5",
        "the relative positions, b(k) added to the scores or q, k rotated, one of the registry's kinds "
        "(fairseq_urpe/models/position_kinds.py; a plugin may add more): {kinds}"),
    PositionOption(
        "rpe_slopes", None, "slopes m of {readers}: 'fixed' or 'learned' (default: {kind_defaults})",
        choices=("fixed", "learned"), keyword="learnable", to_keyword=lambda slopes: str(slopes) == "learned",
        sets="slopes", recorded=True),
    PositionOption(
        "rpe_init", "alibi",
        "start of a learned bias b ('t5', 'learned'): 'alibi' (ALiBi's line -m_h|k|, at each bucket's nearest "
        "distance; a language model learns faster from it) or 'zero' (flat, as T5)",
        choices=("alibi", "zero"), keyword="start", sets="learned bias to start"),
    PositionOption(
        "rpe_num_buckets", 32,
        "T5 buckets of the RPE bias b (and of a bucketed URPE c); causal models use all for past distances",
        type=int, keyword="num_buckets", sets="buckets", sizes="buckets", recorded=True),
    PositionOption(
        "rpe_max_distance", 128,
        "distance where T5's log-spaced buckets end, or the largest distance with its own 'learned' bias; "
        "farther keys share the last entry",
        type=int, keyword="max_distance", sets="bucketed or per-distance table", sizes="distances", recorded=True),
    PositionOption(
        "urpe_toeplitz", "bucketed",
        "URPE Toeplitz reweighting C: 'none' (plain RPE), 'bucketed' (c per T5 bucket of b) or 'unique' (c per "
        "distance up to --urpe-max-distance)",
        choices=tuple(REWEIGHTINGS)),
    PositionOption(
        "urpe_max_distance", None,
        "largest distance with its own c in the 'unique' table (default: --tokens-per-sample - 1)",
        type=int, keyword="max_distance", sets="per-distance C", sizes="distances", recorded=True),
    PositionOption(
        "urpe_beyond_max", "clamp",
        "'unique' C beyond --urpe-max-distance: 'clamp' reuses the last entry, 'error' refuses",
        choices=("clamp", "error"), keyword="beyond_max", sets="per-distance C"),
)}
# The defaults of the options (the language model's; a model's config may change one, as the encoder's
# --rpe-init), against which "given" is judged where no model's config is at hand.
OPTION_DEFAULTS: Dict[str, object] = {field: option.default for field, option in POSITION_OPTIONS.items()}
