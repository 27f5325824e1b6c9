"""Attention modules in float64 with random (not initial) position parameters, shared by the tests of the
dense attention (tests/modules), the kernel dispatch (tests/kernels) and the registry (tests/models).

    make_t5_attention(kind)                      T5's bias, with URPE's C per bucket or per distance (or none)
    make_family_attention(case, C, scores)       a bias case of bias_cases() x any C of TOEPLITZ, with or
                                                 without Q K^T
    make_rotary_attention(urpe)                  RoPE, with or without a per-distance C

``bias_cases()`` is every kind of the registry that acts on the scores, once per value of ``--rpe-slopes``
for the kinds that read it; ``make_bias(case)`` builds its module through the registry, and
``tests/reference.BIAS_FORMULAS`` (or ``PAIR_BIAS_FORMULAS``, for a bias of ``(i, j)``) holds its formula. ``TOEPLITZ`` maps a parameterisation of C to
``(module factory, reference value of c_h(d))``; the reference values are written from the formulas
(``tests/reference.py``), not read from the modules' code.
"""

from types import SimpleNamespace
from typing import List, NamedTuple, Optional

import torch

from fairseq_urpe.models.kind_record import BY_POSITIONS, AttentionShape
from fairseq_urpe.models.position_builders import build_module
from fairseq_urpe.models.position_kinds import POSITION_KINDS
from fairseq_urpe.modules import RelativeMultiheadAttention, RotaryEmbedding, T5RelativeBias, ToeplitzReweighting
from tests.reference import BIAS_FORMULAS, PAIR_BIAS_FORMULAS, t5_bucket, unique_index

EMBED, HEADS = 12, 3  # head dim 4
ROTARY_HEADS = 2  # head dim 6: three rotating pairs
BUCKETS, MAX_DISTANCE = 8, 6  # the family's: small, so the test lengths cover log buckets and clipping
SLOPES = ("fixed", "learned")  # the values of --rpe-slopes


class BiasCase(NamedTuple):
    """A kind that acts on the scores, with ``slopes`` (``--rpe-slopes``) for the kinds that read it."""

    kind: str
    slopes: Optional[str] = None

    def __str__(self) -> str:
        return self.kind if self.slopes is None else f"{self.kind}-{self.slopes}"

    @property
    def options(self) -> SimpleNamespace:
        """The options the registry builds the module from: the family's buckets and distances."""
        return SimpleNamespace(rpe_num_buckets=BUCKETS, rpe_max_distance=MAX_DISTANCE, rpe_init="zero",
                               rpe_slopes=self.slopes)


def bias_cases() -> List[BiasCase]:
    """Every registered kind that acts on the scores, once per ``--rpe-slopes`` value where it reads it."""
    cases = []
    for name, kind in POSITION_KINDS.items():
        if kind.contract.scores:
            cases += [BiasCase(name, s) for s in SLOPES] if "rpe_slopes" in kind.reads else [BiasCase(name)]
    return cases


def one_case_per_kind() -> List[BiasCase]:
    """:func:`bias_cases` with one case per kind: learned slopes where it reads them (a table with a gradient)."""
    return [case for case in bias_cases() if case.slopes in (None, "learned")]


def make_bias(case: BiasCase, num_heads: int = HEADS, bidirectional: bool = False):
    """The case's module (``None`` for a kind without one), built by the registry."""
    shape = AttentionShape(num_heads, EMBED // num_heads, bidirectional)
    return build_module(POSITION_KINDS[case.kind], shape, case.options)


def reads_positions(case: BiasCase) -> bool:
    """Whether the case's bias is a function of the query and key positions ``(i, j)``, not of ``i - j`` alone
    (no table by distance: the fused kernel and flex refuse it)."""
    kind = POSITION_KINDS[case.kind]
    return kind.module is not None and kind.contract is BY_POSITIONS


def table_cases() -> List[BiasCase]:
    """:func:`one_case_per_kind` of the kinds read by distance: those the fused kernel and flex take."""
    return [case for case in one_case_per_kind() if not reads_positions(case)]


def bias_reference(case: BiasCase):
    """``(module, h, i, j) -> b_h(i, j)`` from ``tests/reference.BIAS_FORMULAS`` (``b_h(i - j)``) or
    ``PAIR_BIAS_FORMULAS``, or ``None`` for a kind without a module."""
    if POSITION_KINDS[case.kind].module is None:
        return None
    if case.kind in PAIR_BIAS_FORMULAS:
        pair = PAIR_BIAS_FORMULAS[case.kind]
        return lambda module, h, i, j: pair(module, case.options, h, i, j)
    formula = BIAS_FORMULAS[case.kind]
    return lambda module, h, i, j: formula(module, case.options, h, i - j)


def make_t5_attention(kind, seed=0, num_buckets=8, max_distance=10, dropout=0.0):
    """RPE (``kind="rpe"``) or URPE (``"urpe_bucketed"``, ``"urpe_unique"``) attention with T5's bias."""
    torch.manual_seed(seed)
    bias = T5RelativeBias(HEADS, num_buckets, max_distance)
    toeplitz = None
    if kind == "urpe_bucketed":
        toeplitz = ToeplitzReweighting(HEADS, "bucketed", num_buckets, max_distance)
    elif kind == "urpe_unique":
        toeplitz = ToeplitzReweighting(HEADS, "unique", max_distance=max_distance)
    attn = RelativeMultiheadAttention(EMBED, HEADS, bias, toeplitz, dropout=dropout).double()
    torch.nn.init.normal_(bias.weight)
    if toeplitz is not None:
        torch.nn.init.uniform_(toeplitz.weight, -1.5, 2.5)
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj):
        torch.nn.init.normal_(proj.bias)
    return attn


TOEPLITZ = {
    "rpe": (lambda: None, None),
    "urpe_bucketed": (lambda: ToeplitzReweighting(HEADS, "bucketed", BUCKETS, MAX_DISTANCE),
                      lambda m, h, d: m.weight[h, t5_bucket(d, BUCKETS, MAX_DISTANCE)]),
    "urpe_unique": (lambda: ToeplitzReweighting(HEADS, "unique", max_distance=MAX_DISTANCE),
                    lambda m, h, d: m.weight[h, unique_index(d, MAX_DISTANCE)]),
}
SCORES = {"dot_product": True, "dot_product_free": False}


def make_family_attention(case: BiasCase, toeplitz_kind, dot_product, seed=0):
    """The bias of ``case`` with C ``toeplitz_kind`` of TOEPLITZ, with or without ``Q K^T``."""
    torch.manual_seed(seed)
    attn = RelativeMultiheadAttention(
        EMBED, HEADS, make_bias(case), TOEPLITZ[toeplitz_kind][0](), dot_product=dot_product
    ).double()
    for name, p in attn.named_parameters():
        if name.startswith("toeplitz"):
            torch.nn.init.uniform_(p, -1.5, 2.5)
        elif name.startswith("position_bias") or name.endswith("bias"):
            torch.nn.init.normal_(p)
    return attn


def make_rotary_attention(urpe, seed=0, base=10000.0):
    """RoPE attention over ``ROTARY_HEADS`` heads, with a per-distance C (up to 5) when ``urpe``."""
    torch.manual_seed(seed)
    toeplitz = ToeplitzReweighting(ROTARY_HEADS, "unique", max_distance=5) if urpe else None
    attn = RelativeMultiheadAttention(EMBED, ROTARY_HEADS, toeplitz=toeplitz,
                                      rotary=RotaryEmbedding(EMBED // ROTARY_HEADS, base)).double()
    for name, p in attn.named_parameters():
        torch.nn.init.uniform_(p, -1.5, 2.5) if name.startswith("toeplitz") else torch.nn.init.normal_(p)
    return attn
