"""The position kinds, one declaration (:class:`~.kind_record.PositionKind`) per ``--rpe-kind``: :data:`POSITION_KINDS`.

Everything that lists or builds the kinds reads it: the config's ``--rpe-kind`` help
(``relative_position_config``), the named archs (``architectures``), the option checks
(``option_checks``), the builders (``position_builders``), the generated table docs/architectures.md
(``arch_table``) and the tests. A kind is its module and its declaration here (from outside the package:
a plugin, a test, one call of :func:`register_kind`).
"""

from typing import Dict

from ..modules.alibi_bias import ALiBiBias
from ..modules.fire_bias import FireBias
from ..modules.kerple_bias import KerpleBias
from ..modules.learned_distance_bias import LearnedDistanceBias
from ..modules.log_bias import LogBias
from ..modules.rotary_embedding import RotaryEmbedding
from ..modules.t5_relative_bias import T5RelativeBias
from .kind_record import BY_DISTANCE, BY_POSITIONS, KIND_CONTRACTS, ROTARY, SHAPE_FIELDS, ModuleRecipe, PositionKind
from .position_options import POSITION_OPTIONS

POSITION_KINDS: Dict[str, PositionKind] = {
    "t5": PositionKind(
        T5RelativeBias, shape=("num_heads", "bidirectional"), reads=("rpe_num_buckets", "rpe_max_distance", "rpe_init"),
        error_names=True, arch="rpe",
        description="b_h(k) = w_h[bucket(k)], a learned scalar per head and T5 bucket: N/2 exact distances, then "
        "log-spaced up to --rpe-max-distance, farther ones sharing the last (Raffel et al.)"),
    "alibi": PositionKind(
        ALiBiBias, reads=("rpe_slopes",), defaults={"rpe_slopes": "fixed"},
        description="b_h(k) = -m_h |k| with ALiBi's geometric slopes m_h (Press et al.)"),
    "log": PositionKind(
        LogBias, reads=("rpe_slopes",), defaults={"rpe_slopes": "learned"},
        description="b_h(k) = -m_h log(1 + |k|), m_h > 0 starting at 8x ALiBi's slopes (Wang & E's log-RPE)"),
    "learned": PositionKind(
        LearnedDistanceBias, shape=("num_heads", "bidirectional"), reads=("rpe_max_distance", "rpe_init"),
        error_names=True,
        description="b_h(k) = w_h[min(|k|, D)], a learned scalar per head and distance up to D = --rpe-max-distance "
        "(Shaw et al.)"),
    "rope": PositionKind(
        RotaryEmbedding, shape=("head_dim",), contract=ROTARY,
        description="q and k rotated by their positions, pair m by p 10000^(-2m/d), so q_i k_j depends on i - j "
        "(RoPE, Su et al.)"),
    "kerple": PositionKind(
        KerpleBias, keywords={"kernel": "log"},
        description="b_h(k) = -r1_h log(1 + r2_h |k|), r1, r2 > 0 learned per head (KERPLE's log kernel, Chi et al.)"),
    "kerple_power": PositionKind(
        KerpleBias, keywords={"kernel": "power"},
        description="b_h(k) = -r1_h |k|^r2_h, r1 > 0 and 0 < r2 <= 2 learned per head (KERPLE's power kernel, "
        "Chi et al.)"),
    "none": PositionKind(
        None, arch="nope", more_archs={"ape": {"absolute_positions": True}},
        description="no position term (NoPE); the 'ape' variants keep fairseq's sinusoidal absolute embeddings"),
    "fire": PositionKind(
        FireBias, shape=("num_heads", "bidirectional"), contract=BY_POSITIONS,
        description="b_h(i, j) = f(psi(i - j) / psi(max(L, i)))_h, psi(x) = log(|c| x + 1), f a learned MLP "
        "(1 -> 32 ReLU -> H), c and L learned: a function of the query position i too, so causal only and on the "
        "dense path (FIRE, Li et al.)"),
}


def check_recipe(component: str, recipe: ModuleRecipe) -> None:
    """``ValueError`` naming ``component`` where ``recipe`` takes what no attention has, or reads an option
    that is not declared (:data:`~.position_options.POSITION_OPTIONS`) or becomes no keyword."""
    for name in recipe.shape:
        if name not in SHAPE_FIELDS:
            raise ValueError(f"{component} takes {name!r}, which is none of the attention's {', '.join(SHAPE_FIELDS)}")
    for option in recipe.reads:
        if option not in POSITION_OPTIONS or POSITION_OPTIONS[option].keyword is None:
            raise ValueError(f"{component} reads {option!r}, which is no option a module is built from")
    for option in recipe.defaults:
        if option not in recipe.reads:
            raise ValueError(f"{component} has a default for {option!r}, which it does not read")


def check_kind(name: str, kind: PositionKind) -> None:
    """``ValueError`` where kind ``name``'s declaration cannot be built or placed (:func:`check_recipe`, and
    a contract of :data:`~.kind_record.KIND_CONTRACTS` that its module keeps: the attention reads a bias
    with ``by_distance`` as a table by distance, and calls one without it with the positions)."""
    if KIND_CONTRACTS.get(kind.contract.name) is not kind.contract:
        raise ValueError(f"position kind {name!r} declares the contract {kind.contract.name!r}; a kind's contract is "
                         f"one of {', '.join(KIND_CONTRACTS)}")
    if kind.module is not None:
        method = {BY_DISTANCE: "by_distance", ROTARY: "rotation"}.get(kind.contract)
        if method is not None and not callable(getattr(kind.module, method, None)):
            raise ValueError(f"position kind {name!r} declares the contract {kind.contract.name!r}, but "
                             f"{kind.module.__name__} has no {method}")
        if kind.contract is BY_POSITIONS and callable(getattr(kind.module, "by_distance", None)):
            raise ValueError(f"position kind {name!r} declares the contract {kind.contract.name!r}, but "
                             f"{kind.module.__name__} has by_distance, by which the attention would read it")
    check_recipe(f"position kind {name!r}", kind)


def register_kind(name: str, kind: PositionKind) -> None:
    """Add a kind from outside the package, after it is imported (a plugin's ``--user-dir``, a test):
    ``--rpe-kind name`` then builds it (the option is a plain string, checked against the registry when
    the model is built). The named archs were made at import; use any of them
    (or ``--arch relative_transformer_lm``) with ``--rpe-kind name``."""
    if name in POSITION_KINDS:
        raise ValueError(f"position kind {name!r} is already registered")
    check_kind(name, kind)
    POSITION_KINDS[name] = kind


def position_kind(cfg) -> PositionKind:
    """``cfg``'s ``--rpe-kind`` from the registry; ``ValueError`` naming the option if it is not there."""
    name = str(cfg.rpe_kind)
    if name not in POSITION_KINDS:
        raise ValueError(f"--rpe-kind must be one of {', '.join(POSITION_KINDS)}; got {name!r}")
    return POSITION_KINDS[name]


for _name, _kind in POSITION_KINDS.items():
    check_kind(_name, _kind)
