"""The registry of position kinds: one entry per ``--rpe-kind``.

Everything that lists the kinds reads it: the option's choices and help
(``relative_position_config``), the named archs (``architectures``), the encoder and decoder
(``shared_positions``), the README's family table (checked by a test) and the tests. A new kind is
a module file in ``fairseq_urpe/modules/`` and one entry here.
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple, Type

from torch import nn

from ..modules.alibi_bias import ALiBiBias
from ..modules.learned_distance_bias import LearnedDistanceBias
from ..modules.log_bias import LogBias
from ..modules.rotary_embedding import RotaryEmbedding
from ..modules.t5_relative_bias import T5RelativeBias

SCORES, QUERIES_KEYS = "scores", "queries_keys"


@dataclass(frozen=True)
class KindOptions:
    """What a kind's module may be built from: the attention's sizes and the resolved ``--rpe-*`` options."""

    num_heads: int
    head_dim: int
    bidirectional: bool
    num_buckets: int
    max_distance: int
    learnable_slopes: bool
    bias_start: str = "zero"


@dataclass(frozen=True)
class PositionKind:
    """One ``--rpe-kind``.

    module: the class it builds (``None``: no position term); arguments: its constructor arguments
    from :class:`KindOptions`; description: one line for ``--help`` and the README; acts_on: ``scores``
    (a bias ``b(i - j)``, read by distance) or ``queries_keys`` (a rotation of q and k by position);
    arch: the archs' name part (``transformer_lm_<arch>``, URPE ``transformer_lm_urpe_<arch>``);
    more_archs: further variants of the kind, name part -> option defaults; slopes: the default of
    ``--rpe-slopes`` for kinds that have slopes (``None``: no slopes); dot_product_free: whether it
    works without ``Q K^T`` (and has ``_dpf`` archs).
    """

    module: Optional[Type[nn.Module]]
    arguments: Callable[[KindOptions], Tuple]
    description: str
    acts_on: str = SCORES
    arch: Optional[str] = None
    more_archs: Dict[str, dict] = field(default_factory=dict)
    slopes: Optional[str] = None
    dot_product_free: bool = True

    def build(self, options: KindOptions) -> Optional[nn.Module]:
        return None if self.module is None else self.module(*self.arguments(options))

    def arch_parts(self, name: str) -> Dict[str, dict]:
        """``{name part of an arch: option defaults besides --rpe-kind}`` for the archs of kind ``name``."""
        return {self.arch or name: {}, **self.more_archs}


POSITION_KINDS: Dict[str, PositionKind] = {
    "t5": PositionKind(T5RelativeBias, lambda o: (o.num_heads, o.num_buckets, o.max_distance, o.bidirectional, o.bias_start),
                       "learned scalar per head and log-spaced distance bucket (T5)", arch="rpe"),
    "alibi": PositionKind(ALiBiBias, lambda o: (o.num_heads, o.learnable_slopes),
                          "-m|k| with ALiBi's geometric slopes", slopes="fixed"),
    "log": PositionKind(LogBias, lambda o: (o.num_heads, o.learnable_slopes),
                        "-m log(1+|k|), Wang & E's log-RPE", slopes="learned"),
    "learned": PositionKind(LearnedDistanceBias, lambda o: (o.num_heads, o.max_distance, o.bidirectional, o.bias_start),
                            "learned scalar per head and distance up to --rpe-max-distance (Shaw et al.)"),
    "rope": PositionKind(RotaryEmbedding, lambda o: (o.head_dim,), "q and k rotated by their positions (RoPE, Su et al.)",
                         acts_on=QUERIES_KEYS, dot_product_free=False),
    "none": PositionKind(None, lambda o: (), "no position term (NoPE; the 'ape' archs keep fairseq's absolute embeddings)",
                         arch="nope", more_archs={"ape": {"absolute_positions": True}}),
}


def kinds_with_slopes() -> Tuple[str, ...]:
    return tuple(name for name, kind in POSITION_KINDS.items() if kind.slopes is not None)
