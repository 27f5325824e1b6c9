"""What a position kind, or a layout of URPE's ``C``, is declared as: :class:`PositionKind`, :class:`Reweighting`.

A declaration says how its module is built from the configuration, all by keyword: the facts of the
attention it serves (:class:`AttentionShape`'s fields, under their own names), the options it reads (each
becomes the keyword its :class:`~.position_options.PositionOption` names) and fixed keywords. A kind also
says what its module gives the attention (its :class:`Contract`), whether the fused kernel takes it, and
the name parts of its archs.
"""

from dataclasses import KW_ONLY, dataclass, field, fields
from typing import Dict, Mapping, Optional, Tuple, Type

from torch import nn


@dataclass(frozen=True)
class AttentionShape:
    """The attention a module serves: ``num_heads`` heads of ``head_dim``, causal or ``bidirectional``."""

    num_heads: int
    head_dim: int
    bidirectional: bool


SHAPE_FIELDS = tuple(f.name for f in fields(AttentionShape))


@dataclass(frozen=True)
class Contract:
    """What a module gives attention. name: the contract's name; slot: the
    :class:`~fairseq_urpe.modules.PositionModules` slot (and state-dict key part, ``decoder.<slot>.weight``)
    it fills; method: what its module defines; acts_on: a line for the table of kinds; scores: whether it
    adds to the scores (such kinds also run without ``Q K^T``, ``--dot-product-free``); fused_kernel: whether
    the fused kernel (and flex, which reads the same tables) takes what it gives."""

    name: str
    slot: str
    method: str
    acts_on: str
    scores: bool
    fused_kernel: bool = True


# A bias b_h(i - j): one value per head and distance, read from tables by distance.
BY_DISTANCE = Contract("by_distance", "position_bias", "by_distance(distance (...) long) -> (H, ...)",
                       "scores: b(i - j) added", scores=True)
# A bias b_h(i, j) of the query and key positions (FIRE): evaluated at the call's query rows, no table by
# distance, so neither the fused kernel nor flex takes it.
BY_POSITIONS = Contract("by_positions", "position_bias",
                        "bias(query_positions (T,), key_positions (S,)) -> (H, T, S)", "scores: b(i, j) added", scores=True,
                        fused_kernel=False)
# q_i and k_j rotated by angles of their positions, so that q_i . k_j depends on i - j.
ROTARY = Contract("rotary", "rotary", "rotation(positions (T,), dtype) -> (cos, sin), each (T, head dim)",
                  "q and k: rotated by position", scores=False)
# URPE's c_h(i - j), multiplied onto the probabilities: read by distance, as a bias is.
REWEIGHT = Contract("reweight", "toeplitz", "by_distance(distance (...) long) -> (H, ...)",
                    "probabilities: c(i - j) multiplied", scores=False)
# The contracts a kind may declare, by name (URPE's C is not a kind).
KIND_CONTRACTS: Dict[str, Contract] = {contract.name: contract for contract in (BY_DISTANCE, BY_POSITIONS, ROTARY)}


@dataclass(frozen=True)
class ModuleRecipe:
    """How a module is built from the configuration. module: its class (``None``: no module); shape: the
    :class:`AttentionShape` fields its constructor takes, by their own names; reads: the options (config
    field names) it is built from, each passed as its option's keyword (a value given to an option that
    neither the kind nor ``C`` reads is refused); keywords: fixed keyword arguments; defaults: its own
    default of an option it reads whose configuration default is ``None`` (``rpe_slopes``); error_names:
    its constructor takes ``names``, keyword -> the flag its errors call it (``None``: an option at its
    default, whose value the error gives instead)."""

    module: Optional[Type[nn.Module]]
    _: KW_ONLY
    shape: Tuple[str, ...] = ("num_heads",)
    reads: Tuple[str, ...] = ()
    keywords: Mapping[str, object] = field(default_factory=dict)
    defaults: Mapping[str, object] = field(default_factory=dict)
    error_names: bool = False
    description: str = ""


@dataclass(frozen=True, kw_only=True)
class PositionKind(ModuleRecipe):
    """One ``--rpe-kind``: a :class:`ModuleRecipe` and description (one line for ``--help`` and the table);
    contract: what its module gives attention (:data:`KIND_CONTRACTS`), which says whether the fused kernel
    takes it; arch: its archs' name part (``transformer_lm_<arch>``, URPE ``transformer_lm_urpe_<arch>``;
    default: the kind's name); more_archs: further variants, name part -> option presets."""

    contract: Contract = BY_DISTANCE
    arch: Optional[str] = None
    more_archs: Dict[str, dict] = field(default_factory=dict)

    @property
    def fused_kernel(self) -> bool:
        """Whether the fused kernel (and flex) takes it: a kind without a module, or its contract's say."""
        return self.module is None or self.contract.fused_kernel

    @property
    def dot_product_free(self) -> bool:
        """Whether it works without ``Q K^T`` (and has ``_dpf`` archs): a kind that adds to the scores."""
        return self.module is None or self.contract.scores

    def arch_parts(self, name: str) -> Dict[str, dict]:
        """``{name part of an arch: option presets besides --rpe-kind}`` for the archs of kind ``name``."""
        return {self.arch or name: {}, **self.more_archs}


@dataclass(frozen=True, kw_only=True)
class Reweighting(ModuleRecipe):
    """URPE's ``C`` for one value of ``--urpe-toeplitz``: a :class:`ModuleRecipe` (contract :data:`REWEIGHT`)."""

    contract: Contract = REWEIGHT
