"""The registry of position kinds, one entry per ``--rpe-kind``, and the builder of their modules.

Everything that lists or builds the kinds reads it: ``--rpe-kind``'s help and check
(``relative_position_config``, :func:`build_position_modules`), the named archs (``architectures``), the
encoder and decoder (through :func:`build_position_modules`), the generated table docs/architectures.md
(``arch_table``) and the tests. A new kind is a module (``by_distance(distance) -> (H, ...)`` for a
bias of ``i - j``, or called as ``bias(query_positions, key_positions) -> (H, T, S)`` for a bias of ``(i, j)``,
or ``rotation(positions, dtype) -> (cos, sin)`` for q and k) and one entry here, or, from outside
the package (a plugin, a test), one call of :func:`register_kind`.

This is the config layer: errors here name the command-line option; the modules' own errors do not.
Each option is read by the kinds whose ``reads`` name it and by URPE's ``C`` of the ``--urpe-toeplitz``
values that :data:`TOEPLITZ_READS` gives it; :func:`check_position_options` refuses a value given to an
option that neither the model's kind nor its ``C`` reads.
"""

import argparse
import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Dict, Mapping, Optional, Tuple, Type

from torch import nn

from ..modules import (ALiBiBias, FireBias, KerpleBias, LearnedDistanceBias, LogBias, PositionModules, RotaryEmbedding, T5RelativeBias,
                       ToeplitzReweighting)

SCORES, QUERIES_KEYS = "position_bias", "rotary"  # the PositionModules slots a kind can fill
# What the modules' errors call their arguments: the options that set them.
BIAS_OPTIONS = {"num_buckets": "--rpe-num-buckets", "max_distance": "--rpe-max-distance", "start": "--rpe-init"}
TOEPLITZ_OPTIONS = {"parameterisation": "--urpe-toeplitz", "beyond_max": "--urpe-beyond-max"}
# What URPE's C reads, per --urpe-toeplitz (none: no C): the options ToeplitzReweighting is built from.
TOEPLITZ_READS = {"none": (), "bucketed": ("rpe_num_buckets", "rpe_max_distance"),
                  "unique": ("urpe_max_distance", "urpe_beyond_max")}
# The options' defaults (:class:`RelativePositionConfig`'s; ``None``: not given), against which "given" is judged.
OPTION_DEFAULTS = {"rpe_kind": "t5", "rpe_slopes": None, "rpe_init": "alibi", "rpe_num_buckets": 32, "rpe_max_distance": 128,
                   "urpe_toeplitz": "bucketed", "urpe_max_distance": None, "urpe_beyond_max": "clamp"}
# What an option sets, for the error where nothing reads it ("--rpe-kind alibi has no slopes").
WHAT_IT_SETS = {"rpe_slopes": "slopes", "rpe_num_buckets": "buckets", "rpe_max_distance": "bucketed or per-distance table",
                "rpe_init": "learned bias to start", "urpe_max_distance": "per-distance C", "urpe_beyond_max": "per-distance C"}


@dataclass(frozen=True)
class AttentionShape:
    """The attention a kind's module serves: ``num_heads`` heads of ``head_dim``, causal or ``bidirectional``."""

    num_heads: int
    head_dim: int
    bidirectional: bool


@dataclass(frozen=True)
class PositionKind:
    """One ``--rpe-kind``.

    module: the class it builds (``None``: no position term); reads: the options (config field names) its
    module is built from (a value given to any other position option is refused); arguments:
    ``(shape, options) -> `` the module's constructor arguments, where ``options`` holds the ``reads``
    (``rpe_slopes`` resolved to ``slopes`` when not given) and ``names``, what the module's errors call
    its arguments (:func:`option_names`);
    description: one line for ``--help`` and the README; acts_on: the slot it fills, ``position_bias``
    (a bias ``b(i - j)`` added to the scores) or ``rotary`` (q and k rotated by position); arch: the archs'
    name part (``transformer_lm_<arch>``, URPE ``transformer_lm_urpe_<arch>``; default: the kind's name);
    more_archs: further variants, name part -> option defaults; slopes: the default of ``--rpe-slopes``
    for kinds that read it; dot_product_free: whether it works without ``Q K^T`` (and has ``_dpf`` archs).
    """

    module: Optional[Type[nn.Module]]
    arguments: Callable[[AttentionShape, SimpleNamespace], Tuple] = lambda shape, options: ()
    description: str = ""
    reads: Tuple[str, ...] = ()
    acts_on: str = SCORES
    arch: Optional[str] = None
    more_archs: Dict[str, dict] = field(default_factory=dict)
    slopes: Optional[str] = None
    dot_product_free: bool = True

    def build(self, shape: AttentionShape, cfg) -> Optional[nn.Module]:
        if self.module is None:
            return None
        options = SimpleNamespace(**{name: getattr(cfg, name, None) for name in self.reads}, names=option_names(cfg))
        if "rpe_slopes" in self.reads:
            options.rpe_slopes = str(options.rpe_slopes or self.slopes)
        return self.module(*self.arguments(shape, options))

    def arch_parts(self, name: str) -> Dict[str, dict]:
        """``{name part of an arch: option defaults besides --rpe-kind}`` for the archs of kind ``name``."""
        return {self.arch or name: {}, **self.more_archs}


POSITION_KINDS: Dict[str, PositionKind] = {
    "t5": PositionKind(
        T5RelativeBias,
        lambda s, o: (s.num_heads, o.rpe_num_buckets, o.rpe_max_distance, s.bidirectional, str(o.rpe_init), o.names),
        "b_h(k) = w_h[bucket(k)], a learned scalar per head and T5 bucket: N/2 exact distances, then log-spaced "
        "up to --rpe-max-distance, farther ones sharing the last (Raffel et al.)",
        reads=("rpe_num_buckets", "rpe_max_distance", "rpe_init"), arch="rpe"),
    "alibi": PositionKind(
        ALiBiBias, lambda s, o: (s.num_heads, o.rpe_slopes == "learned"),
        "b_h(k) = -m_h |k| with ALiBi's geometric slopes m_h (Press et al.)",
        reads=("rpe_slopes",), slopes="fixed"),
    "log": PositionKind(
        LogBias, lambda s, o: (s.num_heads, o.rpe_slopes == "learned"),
        "b_h(k) = -m_h log(1 + |k|), m_h > 0 starting at 8x ALiBi's slopes (Wang & E's log-RPE)",
        reads=("rpe_slopes",), slopes="learned"),
    "learned": PositionKind(
        LearnedDistanceBias, lambda s, o: (s.num_heads, o.rpe_max_distance, s.bidirectional, str(o.rpe_init), o.names),
        "b_h(k) = w_h[min(|k|, D)], a learned scalar per head and distance up to D = --rpe-max-distance (Shaw et al.)",
        reads=("rpe_max_distance", "rpe_init")),
    "rope": PositionKind(
        RotaryEmbedding, lambda s, o: (s.head_dim,),
        "q and k rotated by their positions, pair m by p 10000^(-2m/d), so q_i k_j depends on i - j (RoPE, Su et al.)",
        acts_on=QUERIES_KEYS, dot_product_free=False),
    "kerple": PositionKind(
        KerpleBias, lambda s, o: (s.num_heads, "log"),
        "b_h(k) = -r1_h log(1 + r2_h |k|), r1, r2 > 0 learned per head (KERPLE's log kernel, Chi et al.)"),
    "kerple_power": PositionKind(
        KerpleBias, lambda s, o: (s.num_heads, "power"),
        "b_h(k) = -r1_h |k|^r2_h, r1 > 0 and 0 < r2 <= 2 learned per head (KERPLE's power kernel, Chi et al.)"),
    "none": PositionKind(
        None, description="no position term (NoPE); the 'ape' variants keep fairseq's sinusoidal absolute embeddings",
        arch="nope", more_archs={"ape": {"absolute_positions": True}}),
    "fire": PositionKind(
        FireBias, lambda s, o: (s.num_heads, s.bidirectional),
        "b_h(i, j) = f(psi(i - j) / psi(max(L, i)))_h, psi(x) = log(|c| x + 1), f a learned MLP (1 -> 32 ReLU -> H), "
        "c and L learned: a function of the query position i too, so causal only and on the dense path (FIRE, Li et al.)"),
}


def register_kind(name: str, kind: PositionKind) -> None:
    """Add a kind from outside the package, after it is imported (a plugin's ``--user-dir``, a test):
    ``--rpe-kind name`` then builds it (the option is a plain string, checked against the registry when
    the model is built). The named archs were made at import; use any of them
    (or ``--arch relative_transformer_lm``) with ``--rpe-kind name``."""
    if name in POSITION_KINDS:
        raise ValueError(f"position kind {name!r} is already registered")
    if kind.acts_on not in PositionModules.SLOTS or kind.acts_on == "toeplitz":
        raise ValueError(f"a kind acts on {SCORES!r} or {QUERIES_KEYS!r}, got {kind.acts_on!r}")
    POSITION_KINDS[name] = kind


def kinds_with_slopes() -> Tuple[str, ...]:
    return tuple(name for name, kind in POSITION_KINDS.items() if "rpe_slopes" in kind.reads)


def position_options() -> Tuple[str, ...]:
    """Every option (config field name) that some kind or URPE's C reads, in the registry's order."""
    reads = [o for kind in POSITION_KINDS.values() for o in kind.reads] + [o for r in TOEPLITZ_READS.values() for o in r]
    return tuple(dict.fromkeys(reads))


def readers(option: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """``(kinds, toeplitz values)`` that read ``option``."""
    return (tuple(name for name, kind in POSITION_KINDS.items() if option in kind.reads),
            tuple(value for value, reads in TOEPLITZ_READS.items() if option in reads))


def flag(option: str) -> str:
    """The command-line flag of a config field: ``rpe_max_distance`` -> ``--rpe-max-distance``."""
    return "--" + option.replace("_", "-")


def position_kind(cfg) -> PositionKind:
    """``cfg``'s ``--rpe-kind`` from the registry; ``ValueError`` naming the option if it is not there."""
    name = str(cfg.rpe_kind)
    if name not in POSITION_KINDS:
        raise ValueError(f"--rpe-kind must be one of {', '.join(POSITION_KINDS)}; got {name!r}")
    return POSITION_KINDS[name]


def refuse_unread_options(cfg, options) -> None:
    """Raise ``ValueError`` naming the first of ``options`` (config field names: the ones given) that neither
    ``cfg``'s ``--rpe-kind`` nor its ``--urpe-toeplitz`` reads, and the kinds (or ``C``) that would."""
    name, kind, toeplitz = str(cfg.rpe_kind), position_kind(cfg), str(cfg.urpe_toeplitz)
    if toeplitz not in TOEPLITZ_READS:
        raise ValueError(f"--urpe-toeplitz must be one of {', '.join(TOEPLITZ_READS)}; got {toeplitz!r}")
    for option in position_options():
        if option not in options or option in kind.reads or option in TOEPLITZ_READS[toeplitz]:
            continue
        value = getattr(cfg, option, None)
        kinds, values = readers(option)
        readers_text = ", and to ".join(
            ([f"--rpe-kind {' or '.join(kinds)}"] if kinds else []) + ([f"--urpe-toeplitz {' or '.join(values)}"] if values else []))
        subject = " with ".join(([f"--rpe-kind {name}"] if kinds else []) + ([f"--urpe-toeplitz {toeplitz}"] if values else []))
        raise ValueError(f"{flag(option)} applies to {readers_text}; {subject} has no "
                         f"{WHAT_IT_SETS.get(option, 'use for it')} (got {flag(option)} {value})")


def check_position_options(cfg, defaults: Mapping[str, object], longest_distance: int, longest_name: str) -> None:
    """At model build, before any module: raise ``ValueError`` naming the option and the kind (or ``C``)
    where ``cfg`` gives a position option a value other than its default (``defaults``: the model's config
    dataclass's) that neither its ``--rpe-kind`` nor its ``--urpe-toeplitz`` reads. An option given on the
    command line at its default value is refused by the named archs (:func:`refuse_unread_options` on what
    the command line gave); here, where only values are known, ``--urpe-max-distance`` is judged only with
    ``unique`` C, since a model stores the value it derived (``longest_distance``, from ``longest_name``)."""
    toeplitz = str(cfg.urpe_toeplitz)
    refuse_unread_options(cfg, [o for o in position_options() if given(cfg, o, defaults)
                                 and not (o == "urpe_max_distance" and toeplitz != "unique")])
    check_attention_dropout(cfg)
    if toeplitz == "unique" and getattr(cfg, "urpe_max_distance", None) is None and longest_distance <= 0:
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
                           rpe_kind=getattr(args, "rpe_kind", None) or defaults.get("rpe_kind", "t5"),
                           urpe_toeplitz=getattr(args, "urpe_toeplitz", None) or defaults.get("urpe_toeplitz", "bucketed"))
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


def option_names(cfg) -> Dict[str, Optional[str]]:
    """What the modules' errors call their arguments for ``cfg``: the options, or ``None`` for one at its
    default (an error then gives the value, not an option the user never gave)."""
    names = {**BIAS_OPTIONS, **TOEPLITZ_OPTIONS}
    names["num_buckets"] = names["num_buckets"] if given(cfg, "rpe_num_buckets") else None
    names["max_distance"] = names["max_distance"] if given(cfg, "rpe_max_distance") else None
    return names


def built(component: str, make: Callable[[], Optional[nn.Module]]) -> Optional[nn.Module]:
    """``make()``, its ``ValueError`` led by the ``component`` it builds (``--rpe-kind t5``, URPE's ``C``)."""
    try:
        return make()
    except ValueError as error:
        raise ValueError(f"{component}: {error}") from error


INTEGER_OPTIONS = ("rpe_num_buckets", "rpe_max_distance", "urpe_max_distance")
LARGEST_INTEGER = 2**31 - 1  # distances and table entries stay far from int64's end in every index computation
TABLE_BYTES = 2**30  # the most one learned position table may take (float32 entries x heads)


def check_table_sizes(cfg, num_heads: int, bidirectional: bool) -> None:
    """Before any module is built: every integer position option within :data:`LARGEST_INTEGER`, and each
    learned table (T5's buckets, a per-distance bias, URPE's ``c``) within :data:`TABLE_BYTES`; a
    ``ValueError`` names the option that sizes it and the table's size."""
    for option in INTEGER_OPTIONS:
        value = getattr(cfg, option, None)
        if value is not None and int(value) > LARGEST_INTEGER:
            raise ValueError(f"{flag(option)} must be at most {LARGEST_INTEGER}, got {value}")
    kind, toeplitz = position_kind(cfg), str(cfg.urpe_toeplitz)
    sized = []  # (what, option, entries per head)
    if kind.module is not None and "rpe_num_buckets" in kind.reads:
        sized.append(("the bias's buckets", "rpe_num_buckets", cfg.rpe_num_buckets))
    elif kind.module is not None and "rpe_max_distance" in kind.reads:
        sized.append(("the per-distance bias", "rpe_max_distance", per_distance_entries(cfg.rpe_max_distance, bidirectional)))
    if toeplitz == "bucketed":
        sized.append(("C's buckets", "rpe_num_buckets", cfg.rpe_num_buckets))
    elif toeplitz == "unique" and getattr(cfg, "urpe_max_distance", None) is not None:
        sized.append(("the per-distance C", "urpe_max_distance", per_distance_entries(cfg.urpe_max_distance, bidirectional)))
    for what, option, entries in sized:
        size = 4 * num_heads * max(int(entries), 0)
        if size > TABLE_BYTES:
            raise ValueError(f"{flag(option)} {getattr(cfg, option)} makes {what} a table of {num_heads} heads x "
                             f"{int(entries)} float32 entries ({size / 2**30:.1f} GiB), over the "
                             f"{TABLE_BYTES // 2**30} GiB a position table may take: choose a smaller {flag(option)}")


def per_distance_entries(max_distance, bidirectional: bool) -> int:
    return 2 * int(max_distance) + 1 if bidirectional else int(max_distance) + 1


def build_position_modules(cfg, num_heads: int, embed_dim: int, bidirectional: bool) -> PositionModules:
    """``--rpe-kind``'s module (in the slot it acts on) and URPE's ``c`` for attention of ``num_heads``
    heads over ``embed_dim``; raises ``ValueError`` naming the option on impossible combinations, and on
    tables too large (:func:`check_table_sizes`) before allocating anything."""
    name, kind = str(cfg.rpe_kind), position_kind(cfg)
    check_table_sizes(cfg, num_heads, bidirectional)
    if cfg.dot_product_free and not kind.dot_product_free:
        raise ValueError(f"--rpe-kind {name} acts on q and k, which --dot-product-free removes; "
                         f"choose another --rpe-kind or drop --dot-product-free")
    if kind.acts_on == QUERIES_KEYS and (embed_dim // num_heads) % 2:
        raise ValueError(f"--rpe-kind {name} pairs the head's dimensions: the head dim (embed dim / heads) must be "
                         f"even, got {embed_dim // num_heads}")
    module = built(f"--rpe-kind {name}", lambda: kind.build(AttentionShape(num_heads, embed_dim // num_heads, bidirectional), cfg))
    toeplitz = built(f"URPE's {cfg.urpe_toeplitz} C (--urpe-toeplitz {cfg.urpe_toeplitz})",
                     lambda: build_toeplitz(cfg, num_heads, bidirectional))
    return PositionModules(**{kind.acts_on: module}, toeplitz=toeplitz)


def build_toeplitz(cfg, num_heads: int, bidirectional: bool) -> Optional[ToeplitzReweighting]:
    """URPE's ``c`` of ``--urpe-toeplitz`` (``None`` for 'none', i.e. RPE)."""
    if cfg.urpe_toeplitz == "none":
        return None
    names = option_names(cfg)
    if cfg.urpe_toeplitz == "bucketed":
        return ToeplitzReweighting(num_heads, "bucketed", cfg.rpe_num_buckets, cfg.rpe_max_distance, bidirectional,
                                   names=names)
    if cfg.urpe_max_distance is None:
        raise ValueError("--urpe-toeplitz unique needs --urpe-max-distance (or --tokens-per-sample)")
    return ToeplitzReweighting(num_heads, str(cfg.urpe_toeplitz), max_distance=cfg.urpe_max_distance,
                               bidirectional=bidirectional, beyond_max=str(cfg.urpe_beyond_max),
                               names={**names, "max_distance": "--urpe-max-distance"})


def config_defaults(config) -> Dict[str, object]:
    """A config dataclass's field defaults, for :func:`check_position_options`."""
    return {f.name: f.default for f in dataclasses.fields(config)}
