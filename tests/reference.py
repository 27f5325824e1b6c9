"""Plain dense references, written independently of the package: scalar loops and explicit matrices."""

import math

import torch


def t5_bucket(distance: int, num_buckets: int, max_distance: int, bidirectional: bool = False) -> int:
    """T5's bucket for one relative distance ``i - j``, in plain Python float64 arithmetic."""
    offset, n = 0, num_buckets
    if bidirectional:
        n = num_buckets // 2
        if distance < 0:
            offset = n
        distance = abs(distance)
    else:
        distance = max(distance, 0)
    exact = n // 2
    if distance < exact:
        return offset + distance
    large = exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (n - exact))
    return offset + min(large, n - 1)


def unique_index(distance: int, max_distance: int, bidirectional: bool = False) -> int:
    """Row of a per-distance ('unique') table for ``i - j``: clamp to the table, shift if bidirectional."""
    if not bidirectional:
        distance = max(distance, 0)
    distance = max(-max_distance, min(max_distance, distance))
    return distance + max_distance if bidirectional else distance


def press_alibi_slopes(n: int):
    """ALiBi's slopes as Press et al. wrote them (github.com/ofirpress/attention_with_linear_biases)."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest_power_of_2) + press_alibi_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]


def softplus(x):
    return torch.log1p(torch.exp(x))


def kerple_coefficient(r, low: float, high: float = math.inf):
    """KERPLE's ``r`` as Chi et al.'s code uses it: ``min(max(r, low), high)``, with the derivative 1 (their
    code overwrites the parameter's data with the clamped value before each use, so the gradient taken
    there reaches the parameter whole)."""
    return r - r.detach() + min(max(r.item(), low), high)


def kerple_power(r1, r2, d: int):
    """``-r1 |d|^r2`` as ``-r1 exp(r2 ln|d|)`` (0 at ``d = 0``, where it has no gradient)."""
    return -r1 * torch.exp(r2 * math.log(abs(d))) if d else 0.0 * (r1 + r2)


def fire_bias(m, h: int, i: int, j: int):
    """FIRE's ``b_h(i, j)`` (Li et al., ICLR 2024) for query position ``i`` and key position ``j``, from the
    paper: ``f(psi(|i - j|) / (psi(max(L, i)) + 1e-6))_h`` with ``psi(x) = log(|c| x + 1)``, ``L = |l| L0`` and
    ``f(x) = W2 relu(W1 x + b1) + b2``; a float64 scalar tensor (gradients reach every parameter)."""
    c = m.c.double().abs()
    threshold = (m.threshold_scale.double() * m.threshold.double()).abs()
    reach = threshold if threshold.item() > i else torch.tensor(float(i), dtype=torch.float64)  # max(L, i)
    x = torch.log(c * abs(i - j) + 1) / (torch.log(c * reach + 1) + 1e-6)
    hidden = torch.relu(m.hidden_weight.double()[:, 0] * x + m.hidden_bias.double())  # (width,)
    return (m.output_weight.double()[h] * hidden).sum() + m.output_bias.double()[h]


# The formula of every position kind of the registry (fairseq_urpe.models.position_kinds), by its name,
# written from the papers: ``BIAS_FORMULAS[kind](module, options, h, d)`` is ``b_h(d)`` (a float64 scalar
# tensor, so gradients flow to the module's parameters) of ``module``, built with ``options`` (the
# registry's options namespace: rpe_num_buckets, rpe_max_distance, rpe_slopes, ...);
# ``ROTATION_FORMULAS[kind](x)`` is ``x`` (T, d) rotated by position. A kind of the registry that has a
# module and no formula here fails tests/models/test_position_kinds.py.
BIAS_FORMULAS = {
    "t5": lambda m, o, h, d: m.weight[h, t5_bucket(d, o.rpe_num_buckets, o.rpe_max_distance, m.bidirectional)],
    "alibi": lambda m, o, h, d: (
        -m.slopes[h] * abs(d) if o.rpe_slopes == "learned"
        else torch.tensor(-press_alibi_slopes(m.num_heads)[h] * abs(d), dtype=torch.float64)),
    "log": lambda m, o, h, d: (  # Wang & E's log-RPE, slopes starting at 8x ALiBi's
        -softplus(m.rho[h]) * math.log(1 + abs(d)) if o.rpe_slopes == "learned"
        else torch.tensor(-8 * press_alibi_slopes(m.num_heads)[h] * math.log(1 + abs(d)), dtype=torch.float64)),
    "learned": lambda m, o, h, d: m.weight[h, unique_index(d, o.rpe_max_distance, m.bidirectional)],
    "kerple": lambda m, o, h, d: (  # Chi et al.: -r1 log(1 + r2 |d|), r1, r2 >= 0.01
        -kerple_coefficient(m.r1[h], 0.01) * torch.log1p(kerple_coefficient(m.r2[h], 0.01) * abs(d))),
    "kerple_power": lambda m, o, h, d: (  # Chi et al.: -r1 |d|^r2, r1 >= 0.01, 0.01 <= r2 <= 2
        kerple_power(kerple_coefficient(m.r1[h], 0.01), kerple_coefficient(m.r2[h], 0.01, 2.0), d)),
}
ROTATION_FORMULAS = {"rope": lambda x: rope_complex(x)}
# The kinds whose bias is a function of the query and key positions, not of i - j alone:
# ``PAIR_BIAS_FORMULAS[kind](module, options, h, i, j)`` is ``b_h(i, j)``, as above.
PAIR_BIAS_FORMULAS = {"fire": lambda m, o, h, i, j: fire_bias(m, h, i, j)}


def position_matrix(tgt_len: int, src_len: int, heads: int, value_of) -> torch.Tensor:
    """``(H, T, S)`` tensor of ``value_of(h, i - j)`` (a scalar tensor, so gradients flow) for queries at
    the last T of S positions."""
    first = src_len - tgt_len
    return torch.stack([
        torch.stack([torch.stack([value_of(h, first + i - j) for j in range(src_len)]) for i in range(tgt_len)])
        for h in range(heads)
    ])


def pair_matrix(tgt_len: int, src_len: int, heads: int, value_of) -> torch.Tensor:
    """``(H, T, S)`` tensor of ``value_of(h, i, j)`` for query positions ``i`` the last T of S and key positions ``j``."""
    first = src_len - tgt_len
    return torch.stack([
        torch.stack([torch.stack([value_of(h, first + i, j) for j in range(src_len)]) for i in range(tgt_len)])
        for h in range(heads)
    ])


def index_matrix(tgt_len: int, src_len: int, index_of) -> torch.Tensor:
    """``(T, S)`` long matrix of ``index_of(i - j)`` for queries at the last T of S positions."""
    first = src_len - tgt_len
    return torch.tensor([[index_of(first + i - j) for j in range(src_len)] for i in range(tgt_len)])


def rope_complex(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE written as complex multiplication: row ``p`` of ``x`` (T, d), read as ``d/2`` complex numbers
    ``x_m + i x_{m + d/2}``, times ``e^{i p base^(-2m/d)}``; float64."""
    length, d = x.shape
    z = torch.complex(x[:, : d // 2].double(), x[:, d // 2 :].double())
    angles = torch.outer(torch.arange(length, dtype=torch.float64), base ** (-torch.arange(d // 2, dtype=torch.float64) * 2 / d))
    z = z * torch.polar(torch.ones_like(angles), angles)
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


def dense_attention(x, attn, bias_index=None, toeplitz_index=None, key_padding_mask=None, causal=True,
                    bias=None, toeplitz=None, dot_product=True, rope_base=None):
    """Reference RPE/URPE self-attention with ``attn``'s parameters; ``x`` is ``(T, B, E)``.

    ``out_b = concat_h((softmax(Q_h K_h^T / sqrt(d) + B_h + M) ⊙ C_h) V_h) W_o^T + b_o`` where
    ``B_h[i, j] = b[h, bias_index[i, j]]`` (or ``bias[h]``, an ``(H, T, T)`` tensor) and
    ``C_h[i, j] = c[h, toeplitz_index[i, j]]`` (or ``toeplitz[h]``); ``dot_product=False`` drops ``Q K^T``;
    ``rope_base``: ``Q_h``, ``K_h`` rotated by :func:`rope_complex` first.
    """
    tgt_len, bsz, embed_dim = x.shape
    heads = attn.num_heads
    d = embed_dim // heads
    outs = []
    for b in range(bsz):
        per_head = []
        for h in range(heads):
            rows = slice(h * d, (h + 1) * d)
            v = x[:, b] @ attn.v_proj.weight[rows].T + attn.v_proj.bias[rows]
            scores = torch.zeros(tgt_len, tgt_len, dtype=x.dtype)
            if dot_product:
                q = x[:, b] @ attn.q_proj.weight[rows].T + attn.q_proj.bias[rows]
                k = x[:, b] @ attn.k_proj.weight[rows].T + attn.k_proj.bias[rows]
                if rope_base is not None:
                    q, k = rope_complex(q, rope_base), rope_complex(k, rope_base)
                scores = q @ k.T / math.sqrt(d)
            if bias_index is not None:
                scores = scores + attn.position_bias.weight[h][bias_index]
            if bias is not None:
                scores = scores + bias[h]
            blocked = torch.zeros(tgt_len, tgt_len, dtype=torch.bool)
            if causal:
                blocked |= torch.ones(tgt_len, tgt_len, dtype=torch.bool).triu(1)
            if key_padding_mask is not None:
                blocked |= key_padding_mask[b][None, :]
            probs = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
            if toeplitz_index is not None:
                probs = probs * attn.toeplitz.weight[h][toeplitz_index]
            if toeplitz is not None:
                probs = probs * toeplitz[h]
            per_head.append(probs @ v)
        outs.append(torch.cat(per_head, dim=-1) @ attn.out_proj.weight.T + attn.out_proj.bias)
    return torch.stack(outs, dim=1)


def causal_mask(length: int, dtype=torch.float64) -> torch.Tensor:
    """fairseq's additive future mask: ``-inf`` above the diagonal."""
    return torch.full((length, length), float("-inf"), dtype=dtype).triu(1)

