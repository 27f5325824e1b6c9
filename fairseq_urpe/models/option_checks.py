"""The checks of the position options, written from the declarations: errors name the command-line option.

Each option is read by the kinds whose ``reads`` name it (:data:`~.position_kinds.POSITION_KINDS`) and by
URPE's ``C`` of the ``--urpe-toeplitz`` values whose ``reads`` name it (:data:`~.reweightings.REWEIGHTINGS`);
:func:`check_position_options` refuses a value given to an option that neither the model's kind nor its
``C`` reads, naming what the option sets (its declaration's ``sets``).
"""

import argparse
import dataclasses
from types import SimpleNamespace
from typing import Callable, Dict, Mapping, Tuple

from .position_kinds import POSITION_KINDS, check_recipe, position_kind
from .position_options import OPTION_DEFAULTS, POSITION_OPTIONS, flag
from .reweightings import REWEIGHTINGS

LARGEST_INTEGER = 2**31 - 1  # distances and table entries stay far from int64's end in every index computation
TABLE_BYTES = 2**30  # the most one learned position table may take (float32 entries x heads)

for _value, _recipe in REWEIGHTINGS.items():
    check_recipe(f"--urpe-toeplitz {_value}", _recipe)


def kinds_reading(option: str) -> Tuple[str, ...]:
    """The kinds that read ``option``, in the registry's order."""
    return tuple(name for name, kind in POSITION_KINDS.items() if option in kind.reads)


def readers(option: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """``(kinds, --urpe-toeplitz values)`` that read ``option``."""
    return kinds_reading(option), tuple(value for value, c in REWEIGHTINGS.items() if option in c.reads)


def position_options() -> Tuple[str, ...]:
    """Every option (config field name) that some kind or URPE's C reads, in the order the declarations read them."""
    reads = [o for kind in POSITION_KINDS.values() for o in kind.reads] + [o for c in REWEIGHTINGS.values() for o in c.reads]
    return tuple(dict.fromkeys(reads))


def reweighting(cfg):
    """``cfg``'s ``--urpe-toeplitz`` declaration; ``ValueError`` naming the option if there is none."""
    value = str(cfg.urpe_toeplitz)
    if value not in REWEIGHTINGS:
        raise ValueError(f"--urpe-toeplitz must be one of {', '.join(REWEIGHTINGS)}; got {value!r}")
    return REWEIGHTINGS[value]


def refuse_unread_options(cfg, options) -> None:
    """Raise ``ValueError`` naming the first of ``options`` (config field names: the ones given) that neither
    ``cfg``'s ``--rpe-kind`` nor its ``--urpe-toeplitz`` reads, and the kinds (or ``C``) that would."""
    name, kind, layout = str(cfg.rpe_kind), position_kind(cfg), str(cfg.urpe_toeplitz)
    c = reweighting(cfg)
    for option in position_options():
        if option not in options or option in kind.reads or option in c.reads:
            continue
        value = getattr(cfg, option, None)
        kinds, values = readers(option)
        readers_text = ", and to ".join(
            ([f"--rpe-kind {' or '.join(kinds)}"] if kinds else []) + ([f"--urpe-toeplitz {' or '.join(values)}"] if values else []))
        subject = " with ".join(([f"--rpe-kind {name}"] if kinds else []) + ([f"--urpe-toeplitz {layout}"] if values else []))
        raise ValueError(f"{flag(option)} applies to {readers_text}; {subject} has no "
                         f"{POSITION_OPTIONS[option].sets} (got {flag(option)} {value})")


def check_position_options(cfg, defaults: Mapping[str, object], longest_distance: int, longest_name: str) -> None:
    """At model build, before any module: raise ``ValueError`` naming the option and the kind (or ``C``)
    where ``cfg`` gives a position option a value other than its default (``defaults``: the model's config
    dataclass's) that neither its ``--rpe-kind`` nor its ``--urpe-toeplitz`` reads. An option given on the
    command line at its default value is refused by the named archs (:func:`refuse_unread_options` on what
    the command line gave); here, where only values are known, ``--urpe-max-distance`` is judged only with
    ``unique`` C, since a model stores the value it derived (``longest_distance``, from ``longest_name``)."""
    layout = str(cfg.urpe_toeplitz)
    refuse_unread_options(cfg, [o for o in position_options() if given(cfg, o, defaults)
                                 and not (o == "urpe_max_distance" and layout != "unique")])
    check_attention_dropout(cfg)
    if layout == "unique" and getattr(cfg, "urpe_max_distance", None) is None and longest_distance <= 0:
        raise ValueError(f"--urpe-toeplitz unique keeps a c per distance up to {longest_name} = {longest_distance}, "
                         f"which must be positive")


def given_on_command_line(args) -> Tuple[str, ...]:
    """The position options that ``args`` holds before an arch function fills in its defaults: those the
    command line gave, at whatever value. fairseq parses model options without defaults into an
    ``argparse.Namespace``; an arch function called on a stored config (a checkpoint's, when fairseq builds
    its model) sees every option set, and nothing counts as given there."""
    if not isinstance(args, argparse.Namespace):
        return ()
    return tuple(o for o in position_options() if getattr(args, o, None) is not None)


def refuse_unread_given(args, given_options, defaults: Mapping[str, object] = OPTION_DEFAULTS) -> None:
    """An arch function's check, after its presets: every option the command line gave (``given_options``)
    must be read by the kind or its ``C``, whatever its value (see :func:`refuse_unread_options`);
    ``--rpe-kind`` and ``--urpe-toeplitz`` not set yet are taken from ``defaults``."""
    view = SimpleNamespace(**{o: getattr(args, o, None) for o in position_options()},
                           rpe_kind=getattr(args, "rpe_kind", None) or defaults.get("rpe_kind", OPTION_DEFAULTS["rpe_kind"]),
                           urpe_toeplitz=getattr(args, "urpe_toeplitz", None)
                           or defaults.get("urpe_toeplitz", OPTION_DEFAULTS["urpe_toeplitz"]))
    refuse_unread_options(view, given_options)


def command_line_check(defaults: Mapping[str, object]) -> Callable:
    """The arch function of a model's own name (``--arch relative_transformer_lm``): no presets, only the
    check of what the command line gave (fairseq's own does nothing)."""

    def architecture(args):
        refuse_unread_given(args, given_on_command_line(args), defaults)

    return architecture


def check_attention_dropout(cfg) -> None:
    """``--attention-dropout`` must be a rate in [0, 1) (NaN and negative rates would turn dropout off silently)."""
    rate = getattr(cfg, "attention_dropout", 0.0)
    try:
        ok = 0.0 <= float(rate) < 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"--attention-dropout must be a rate in [0, 1), got {rate}")


def resolve_position_options(cfg, defaults: Mapping[str, object], longest_distance: int, longest_name: str) -> None:
    """What a model's ``build_model`` does first: :func:`check_position_options`, then ``--urpe-max-distance``
    defaults to ``longest_distance``."""
    check_position_options(cfg, defaults, longest_distance, longest_name)
    if getattr(cfg, "urpe_max_distance", None) is None:
        cfg.urpe_max_distance = longest_distance


def given(cfg, option: str, defaults: Mapping[str, object] = OPTION_DEFAULTS) -> bool:
    """Whether ``cfg`` sets ``option`` to other than its default (what an error may name)."""
    value = getattr(cfg, option, None)
    return value is not None and str(value) != str(defaults.get(option))


def config_defaults(config) -> Dict[str, object]:
    """A config dataclass's field defaults, for :func:`check_position_options`."""
    return {f.name: f.default for f in dataclasses.fields(config)}


def check_table_sizes(cfg, num_heads: int, bidirectional: bool) -> None:
    """Before any module is built: every integer position option within :data:`LARGEST_INTEGER`, and each
    learned table (T5's buckets, a per-distance bias, URPE's ``c``) within :data:`TABLE_BYTES`; a
    ``ValueError`` names the option that sizes it and the table's size. A table's size is set by the first
    option its declaration reads that sizes one (the option's ``sizes``)."""
    for option in POSITION_OPTIONS.values():
        value = getattr(cfg, option.field, None)
        if option.type is int and value is not None and int(value) > LARGEST_INTEGER:
            raise ValueError(f"{option.flag} must be at most {LARGEST_INTEGER}, got {value}")
    kind, c = position_kind(cfg), reweighting(cfg)
    sized = []  # (what, option, entries per head)
    for recipe, of_buckets, per_distance in ((kind, "the bias's buckets", "the per-distance bias"),
                                             (c, "C's buckets", "the per-distance C")):
        if recipe.module is None:
            continue
        option = next((POSITION_OPTIONS[o] for o in recipe.reads if POSITION_OPTIONS[o].sizes), None)
        value = getattr(cfg, option.field, None) if option is not None else None
        if value is None:
            continue
        if option.sizes == "buckets":
            sized.append((of_buckets, option, value))
        else:
            sized.append((per_distance, option, per_distance_entries(value, bidirectional)))
    for what, option, entries in sized:
        size = 4 * num_heads * max(int(entries), 0)
        if size > TABLE_BYTES:
            raise ValueError(f"{option.flag} {getattr(cfg, option.field)} makes {what} a table of {num_heads} heads x "
                             f"{int(entries)} float32 entries ({size / 2**30:.1f} GiB), over the "
                             f"{TABLE_BYTES // 2**30} GiB a position table may take: choose a smaller {option.flag}")


def per_distance_entries(max_distance, bidirectional: bool) -> int:
    return 2 * int(max_distance) + 1 if bidirectional else int(max_distance) + 1
