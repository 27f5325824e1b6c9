"""Inputs of the fused kernel and the gradient comparison its tests share."""

import torch


def make_inputs(batch, heads, length, head_dim, dtype, bias=True, toeplitz=True, padding=None, seed=0):
    """Random q, k, v (B, H, T, d), tables (H, T) away from their initial 0 and 1, and a padding mask."""
    torch.manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, length, head_dim, dtype=dtype, requires_grad=True) for _ in range(3))
    bias_table = torch.randn(heads, length, dtype=dtype, requires_grad=True) if bias else None
    c_table = torch.empty(heads, length, dtype=dtype).uniform_(-0.5, 2.0).requires_grad_() if toeplitz else None
    mask = None
    if padding == "right":  # fairseq LM batches: the shorter sequence ends in pads
        mask = torch.zeros(batch, length, dtype=torch.bool)
        mask[0, -5:] = True
    elif padding == "left":  # batched generation: the first queries of sequence 1 see only pads
        mask = torch.zeros(batch, length, dtype=torch.bool)
        mask[-1, :3] = True
        mask[0, -2:] = True
    return q, k, v, bias_table, c_table, mask


def assert_same_gradients(out, want, leaves, **tolerance):
    """Every gradient of ``out`` equals that of ``want`` under one random upstream gradient; ``leaves``:
    ``[(name, tensor or None)]`` (``None``: absent, skipped)."""
    leaves = [(name, x) for name, x in leaves if x is not None]
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, [x for _, x in leaves], upstream)
    expected = torch.autograd.grad(want, [x for _, x in leaves], upstream)
    for (name, _), g, e in zip(leaves, got, expected):
        torch.testing.assert_close(g, e, **tolerance, msg=lambda m: f"gradient of the {name}: {m}")
