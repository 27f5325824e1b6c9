"""Wang & E's one-layer Transformer on scalar inputs, evaluated at the last position only.

The paper's layer (its eqs. 2-4), for inputs ``x_1 .. x_N`` (scalars, ``d = 1``) and the output at ``t = N``:

    x0_s   = W_E x_s + b_E                                              (D,)   embedding
    score_hs = <W_Q^h x0_N, W_K^h x0_s> + p_h phi(N - s)                       one query, every key
    a_hs   = softmax_s(score_hs)      (or exp(score_hs): "normalization-free", the class of its Sec. 4)
    attn   = W_O sum_h W_V^h sum_s a_hs x0_s                            (D,)
    h      = x0_N + attn                                                        residual
    y      = sum_k a_k ReLU(b_k . h + c_k) + a_0                         FFN read-out (width m, no residual),
             or y = r . h + r_0 without an FFN

``phi`` is the paper's: ``phi_lin(l) = -l`` for ``l >= 0``; ``phi_log(l) = -log l`` for ``l >= 1`` and ``-inf``
at ``l = 0`` (a log head never sees the current token); ``p_h = exp(log_p_h) > 0`` as in the paper. Two more kinds
instead of ``p_h phi(l)``: ``t5``, a learned bias per T5 bucket of the lag (``relative_position_bucket``, causal,
32 buckets, max distance 128: lags 0..15 exact, log-spaced buckets beyond, the last from lag 113 on), and
``learned``, a free bias ``b_h(l)`` per lag. Both start at zero (uniform attention).

Because ``x_s`` is a scalar the key is affine in it, ``W_K^h x0_s = x_s k_h + k'_h``, so
``score_hs = gamma_h x_s + delta_h + p_h phi(N - s)`` with ``gamma_h = <q_h, k_h>``, ``delta_h = <q_h, k'_h>``, and
``sum_s a_hs x0_s = W_E z_h + b_E S_h`` with ``z_h = sum_s a_hs x_s``, ``S_h = sum_s a_hs`` (1 under a softmax).
``forward`` computes exactly that: ``O(B H N)`` instead of a dense ``O(B N^2 D)`` attention.
``dense_reference`` is the literal layer (every query and key, the full causal matrix) for tests.
"""

import math

import torch
from torch import nn

from fairseq_urpe.modules.distance_index import relative_position_bucket

KINDS = ("lin", "log", "t5", "learned")
T5_BUCKETS, T5_MAX_DISTANCE = 32, 128
POSITION_PARAMETERS = ("log_p", "lag_bias", "bucket_bias")  # the position parameters of each kind, by name
INIT_RANGES = {"lin": (1 / 1024, 1.0), "log": (1 / 4, 4.0)}  # log-uniform start of p per head


def phi(kind, lags):
    """The paper's ``phi_type`` at ``lags`` (a float tensor of integers >= 0)."""
    if kind == "lin":
        return -lags
    if kind == "log":
        return torch.where(lags >= 1, -torch.log(lags.clamp(min=1)), torch.full_like(lags, -math.inf))
    raise ValueError(f"phi kind must be lin or log; got {kind!r}")


def t5_buckets(lags):
    """T5's causal bucket of each lag (long tensor of lags >= 0; negative ones, future keys, share bucket 0)."""
    return relative_position_bucket(lags, T5_BUCKETS, T5_MAX_DISTANCE, bidirectional=False)


class LastRowTransformer(nn.Module):
    def __init__(self, length, heads, kind="lin", dot_product=False, ffn_width=None, width=16, normalize=True,
                 alphabet=None, seed=0):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
        generator = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        self.length, self.heads, self.kind, self.dot_product = length, heads, kind, dot_product
        self.normalize, self.width = normalize, width
        self.alphabet = None if alphabet is None else tuple(float(v) for v in alphabet)  # inputs' values, if finite
        self.embed = nn.Linear(1, width)  # W_E, b_E
        if dot_product:
            self.query = nn.Parameter(torch.randn(heads, width, width) / math.sqrt(width))  # W_Q^h (H, D, D)
            self.key = nn.Parameter(torch.randn(heads, width, width) / math.sqrt(width))  # W_K^h
        self.value = nn.Parameter(torch.randn(heads, width, width) / math.sqrt(width))  # W_V^h
        self.out = nn.Linear(width, width, bias=False)  # W_O
        if kind == "learned":
            self.lag_bias = nn.Parameter(torch.zeros(heads, length))  # b_h(l), l = 0 .. N-1
        elif kind == "t5":
            self.bucket_bias = nn.Parameter(torch.zeros(heads, T5_BUCKETS))  # b_h(bucket(l))
            self.register_buffer("lag_buckets", t5_buckets(torch.arange(length)), persistent=False)  # (N,) by lag
        else:
            low, high = INIT_RANGES[kind]
            u = torch.rand(heads, generator=generator, dtype=torch.float64)
            self.log_p = nn.Parameter((math.log(low) + u * (math.log(high) - math.log(low))).float())
        self.register_buffer("lags", torch.arange(length - 1, -1, -1, dtype=torch.float32), persistent=False)
        if ffn_width:
            self.readout = nn.Sequential(nn.Linear(width, ffn_width), nn.ReLU(), nn.Linear(ffn_width, 1))
        else:
            self.readout = nn.Linear(width, 1)

    def position_parameters(self):
        return [p for n, p in self.named_parameters() if n in POSITION_PARAMETERS]

    def lag_bias_table(self):
        """``(H, N)``: a learned kind's bias by lag ``0 .. N-1``."""
        return self.lag_bias if self.kind == "learned" else self.bucket_bias[:, self.lag_buckets]

    def position_bias(self):
        """``(H, N)``: the bias of each head on the keys ``s = 1 .. N`` (lag ``N - s``)."""
        if self.kind in ("learned", "t5"):
            return self.lag_bias_table().flip(-1)  # key s has lag N - s
        lags = self.lags.to(self.log_p.dtype)
        values = phi(self.kind, lags)
        never = torch.isinf(values)  # lag 0 of a log head: masked after the product, so no 0 * inf gradient
        bias = torch.exp(self.log_p)[:, None] * values.masked_fill(never, 0.0)[None, :]
        return bias.masked_fill(never[None, :], -math.inf)  # (H, N)

    def weights(self, x):
        """``(B, H, N)``: attention of the last position on every key."""
        bias = self.position_bias()[None]  # (1, H, N)
        if self.dot_product:
            gamma, delta = self.scores_by_content(x)
            scores = gamma[..., None] * x[:, None, :] + delta[..., None] + bias  # (B, H, N)
        else:
            scores = bias.expand(x.size(0), -1, -1)
        return torch.softmax(scores, dim=-1) if self.normalize else torch.exp(scores)

    def scores_by_content(self, x):
        """``gamma, delta`` (B, H): the dot-product part of the score is ``gamma_h x_s + delta_h``."""
        w_e, b_e = self.embed.weight[:, 0], self.embed.bias
        # q_h = W_Q^h x0_N = x_N W_Q^h W_E + W_Q^h b_E; key W_K^h x0_s = x_s W_K^h W_E + W_K^h b_E
        k_slope, k_const = self.key @ w_e, self.key @ b_e  # (H, D)
        q_slope, q_const = self.query @ w_e, self.query @ b_e  # (H, D)
        x_n = x[:, -1:]  # (B, 1)
        gamma = x_n * (q_slope * k_slope).sum(-1) + (q_const * k_slope).sum(-1)  # (B, H)
        delta = x_n * (q_slope * k_const).sum(-1) + (q_const * k_const).sum(-1)
        return gamma, delta

    def mix(self, x):
        """``z_h = sum_s a_hs x_s`` and ``S_h = sum_s a_hs``, each (B, H)."""
        if not self.dot_product and self.normalize:  # one kernel for the whole batch
            kernel = self.weights(x[:1])[0]  # (H, N)
            return x @ kernel.T, kernel.sum(-1).expand(x.size(0), -1)
        if self.alphabet is None:  # any real inputs: the (B, H, N) weights
            a = self.weights(x)
            return (a * x[:, None, :]).sum(-1), a.sum(-1)
        # Inputs from a finite alphabet: sum_s exp(gamma x_s + b_s) over the keys holding value v is
        # exp(gamma v) A_v with A_v = sum_{s: x_s = v} exp(b_s), one matrix product per value.
        bias = self.position_bias()  # (H, N)
        top = bias.detach().max(-1).values  # (H,), for range only; added back below
        kernel = torch.exp(bias - top[:, None])  # (H, N)
        values = torch.tensor(self.alphabet, dtype=x.dtype)
        counts = torch.stack([(x == v).to(x.dtype) @ kernel.T for v in self.alphabet], -1)  # (B, H, V): A_v
        gamma, delta = self.scores_by_content(x) if self.dot_product else (torch.zeros_like(counts[..., 0]),) * 2
        present = counts > 0
        logs = torch.where(present, gamma[..., None] * values + torch.log(counts.clamp(min=1e-300)), -math.inf)
        if self.normalize:
            w = torch.softmax(logs, dim=-1)  # (B, H, V)
            return (w * values).sum(-1), w.sum(-1)
        mass = torch.exp(logs + (delta + top)[..., None])  # (B, H, V)
        return (mass * values).sum(-1), mass.sum(-1)

    def hidden(self, x):
        """``(B, D)``: ``h`` at the last position."""
        w_e, b_e = self.embed.weight[:, 0], self.embed.bias
        z, total = self.mix(x)  # (B, H) each
        # sum_h W_V^h sum_s a_hs x0_s = sum_h (z_h W_V^h W_E + S_h W_V^h b_E)
        v_slope, v_const = self.value @ w_e, self.value @ b_e  # (H, D) each
        attn = self.out(z @ v_slope + total @ v_const)  # (B, D)
        return x[:, -1:] * w_e + b_e + attn

    def forward(self, x):  # x: (B, N) -> (B,)
        return self.readout(self.hidden(x)).squeeze(-1)

    def dense_reference(self, x):
        """The literal layer: every position's query and key, the full causal attention, then its last row."""
        n = x.size(1)
        x0 = self.embed(x[..., None])  # (B, N, D)
        pos = torch.arange(n, dtype=x.dtype)
        lag = pos[:, None] - pos[None, :]  # (N, N): t - s
        causal = lag >= 0
        if self.kind == "learned":
            bias = self.lag_bias[:, lag.clamp(min=0).long()]  # (H, N, N)
        elif self.kind == "t5":  # the bucket of each (query, key) distance, computed here from the distance
            bias = self.bucket_bias[:, t5_buckets(lag.long())]
        else:
            bias = torch.exp(self.log_p)[:, None, None] * phi(self.kind, lag.clamp(min=0))[None]
        scores = bias[None].expand(x.size(0), -1, -1, -1).clone()  # (B, H, N, N)
        if self.dot_product:
            q = torch.einsum("hij,btj->bhti", self.query, x0)
            k = torch.einsum("hij,btj->bhti", self.key, x0)
            scores = scores + q @ k.transpose(-1, -2)
        scores = scores.masked_fill(~causal, -math.inf)
        a = torch.softmax(scores, dim=-1) if self.normalize else torch.exp(scores)
        v = torch.einsum("hij,btj->bhti", self.value, x0)  # (B, H, N, D)
        attn = self.out((a @ v).sum(1))  # (B, N, D)
        h = x0 + attn
        return self.readout(h[:, -1]).squeeze(-1)
