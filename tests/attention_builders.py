"""Attention modules in float64 with random (not initial) position parameters, shared by the tests of the
dense attention (tests/modules), the kernel dispatch (tests/kernels) and the registry (tests/models).

    make_t5_attention(kind)                   T5's bias, with URPE's C per bucket or per distance (or none)
    make_family_attention(bias, C, scores)    any bias of BIASES x any C of TOEPLITZ, with or without Q K^T
    make_rotary_attention(urpe)               RoPE, with or without a per-distance C

``BIASES`` / ``TOEPLITZ`` map a name to ``(module factory, reference value of b_h(d) or c_h(d))``; the
reference values are written from the formulas (``tests/reference.py``), not read from the modules' code.
"""

import math

import torch

from fairseq_urpe.modules import (
    ALiBiBias,
    LearnedDistanceBias,
    LogBias,
    RelativeMultiheadAttention,
    RotaryEmbedding,
    T5RelativeBias,
    ToeplitzReweighting,
)
from tests.reference import press_alibi_slopes, t5_bucket, unique_index

EMBED, HEADS = 12, 3  # head dim 4
ROTARY_HEADS = 2  # head dim 6: three rotating pairs
BUCKETS, MAX_DISTANCE = 8, 6  # the family's: small, so the test lengths cover log buckets and clipping


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


def softplus(x):
    return torch.log1p(torch.exp(x))


# kind -> (module factory, reference value of b_h(d) as a scalar tensor given the module)
BIASES = {
    "t5": (lambda: T5RelativeBias(HEADS, BUCKETS, MAX_DISTANCE), lambda m, h, d: m.weight[h, t5_bucket(d, BUCKETS, MAX_DISTANCE)]),
    "alibi": (lambda: ALiBiBias(HEADS), lambda m, h, d: torch.tensor(-press_alibi_slopes(HEADS)[h] * abs(d), dtype=torch.float64)),
    "alibi_learned": (lambda: ALiBiBias(HEADS, learnable=True), lambda m, h, d: -m.slopes[h] * abs(d)),
    "log": (lambda: LogBias(HEADS), lambda m, h, d: -softplus(m.rho[h]) * math.log(1 + abs(d))),
    "log_fixed": (lambda: LogBias(HEADS, learnable=False),
                  lambda m, h, d: torch.tensor(-8 * press_alibi_slopes(HEADS)[h] * math.log(1 + abs(d)), dtype=torch.float64)),
    "learned": (lambda: LearnedDistanceBias(HEADS, MAX_DISTANCE), lambda m, h, d: m.weight[h, unique_index(d, MAX_DISTANCE)]),
    "none": (lambda: None, None),
}
TOEPLITZ = {
    "rpe": (lambda: None, None),
    "urpe_bucketed": (lambda: ToeplitzReweighting(HEADS, "bucketed", BUCKETS, MAX_DISTANCE),
                      lambda m, h, d: m.weight[h, t5_bucket(d, BUCKETS, MAX_DISTANCE)]),
    "urpe_unique": (lambda: ToeplitzReweighting(HEADS, "unique", max_distance=MAX_DISTANCE),
                    lambda m, h, d: m.weight[h, unique_index(d, MAX_DISTANCE)]),
}
SCORES = {"dot_product": True, "dot_product_free": False}


def make_family_attention(kind, toeplitz_kind, dot_product, seed=0):
    """Bias ``kind`` of BIASES with C ``toeplitz_kind`` of TOEPLITZ, with or without ``Q K^T``."""
    torch.manual_seed(seed)
    attn = RelativeMultiheadAttention(
        EMBED, HEADS, BIASES[kind][0](), TOEPLITZ[toeplitz_kind][0](), dot_product=dot_product
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
