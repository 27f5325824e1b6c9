"""The causal model of the memory experiments, built from the plugin's attention and position modules.

    h_0 = E x                                      a linear embedding of the inputs (B, T, D) -> (T, B, W)
    h_l = h_{l-1} + Attn_l(norm(h_{l-1}))          RelativeMultiheadAttention: b = lin (ALiBi's -m|k|), log
                                                   (-m log(1+|k|)) or learned (one b per distance); with or
                                                   without Q K^T
    h_l = h_l + FFN_l(norm(h_l))                   optional (GELU, width 4W); norms only where there is an FFN,
                                                   so a model without one is linear in x
    y   = r^T h_L                                  (T, B, W) -> (B, T)

Position parameters start neutral, the same for every task: lin slopes ``m`` log-uniform in [1/128, 1]
(effective ranges 1 .. 128), log slopes log-uniform in [1/4, 4] (the same spread of exponents), drawn from
the model's seed; per-distance biases start at zero (uniform attention).
"""

import math

import torch
from torch import nn

from fairseq_urpe.modules import ALiBiBias, LearnedDistanceBias, LogBias, RelativeMultiheadAttention

KINDS = ("lin", "log", "learned")
SLOPE_RANGES = {"lin": (1 / 128, 1.0), "log": (1 / 4, 4.0)}


def neutral_slopes(kind, heads, generator):
    """``(H,)`` slopes log-uniform in ``SLOPE_RANGES[kind]``."""
    low, high = SLOPE_RANGES[kind]
    u = torch.rand(heads, generator=generator, dtype=torch.float64)
    return torch.exp(math.log(low) + u * (math.log(high) - math.log(low))).float()


def build_bias(kind, heads, max_len, generator):
    if kind == "lin":
        bias = ALiBiBias(heads, learnable=True)
        with torch.no_grad():
            bias.slopes.copy_(neutral_slopes(kind, heads, generator))
        return bias
    if kind == "log":
        bias = LogBias(heads, learnable=True)
        with torch.no_grad():
            bias.rho.copy_(torch.log(torch.expm1(neutral_slopes(kind, heads, generator))))  # softplus^-1(m)
        return bias
    if kind == "learned":
        return LearnedDistanceBias(heads, max_len)  # zeros
    raise ValueError(f"position kind must be one of {', '.join(KINDS)}; got {kind!r}")


class MemoryBlock(nn.Module):
    def __init__(self, width, heads, kind, dot_product, ffn, max_len, generator):
        super().__init__()
        self.attn = RelativeMultiheadAttention(width, heads, position_bias=build_bias(kind, heads, max_len, generator),
                                               dot_product=dot_product)
        self.norm = nn.LayerNorm(width) if ffn else nn.Identity()
        self.ffn = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width)) if ffn else None

    def forward(self, h, mask):  # h: (T, B, W)
        h = h + self.attn(self.norm(h), attn_mask=mask, need_weights=False)[0]
        return h + self.ffn(h) if self.ffn is not None else h


class MemoryModel(nn.Module):
    """``forward(x (B, T, D)) -> (B, T)``, causal."""

    def __init__(self, d_in, width, heads, layers, kind, dot_product, ffn, max_len, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        self.embed = nn.Linear(d_in, width)
        self.blocks = nn.ModuleList(
            MemoryBlock(width, heads, kind, dot_product, ffn, max_len, generator) for _ in range(layers))
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        length = x.size(1)
        mask = torch.full((length, length), float("-inf")).triu(1)  # causal, (T, T)
        h = self.embed(x).transpose(0, 1)  # (T, B, W)
        for block in self.blocks:
            h = block(h, mask)
        return self.out(h).squeeze(-1).transpose(0, 1)  # (B, T)

    def position_parameters(self):
        return [p for n, p in self.named_parameters() if "position_bias" in n]
