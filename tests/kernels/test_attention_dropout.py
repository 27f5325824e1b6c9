"""Attention dropout inside the kernel (Philox, regenerated in backward) under Triton's interpreter.

The kernel's mask for a seed is written out by ``attention_dropout_mask``; with it, the fused kernel must
equal the reference and the attention module's dense path fed that same mask, forward and every
gradient, and the mask must keep 1 - p of the entries, independently of each other.
"""

import logging
import os

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from fairseq_urpe.kernels import dispatch, dropout_rate  # noqa: E402
from fairseq_urpe.kernels import fused_urpe_attention as kernel  # noqa: E402
from fairseq_urpe.kernels.dispatch import attention_backend  # noqa: E402
from fairseq_urpe.kernels.fused_urpe_attention import attention_dropout_mask, fused_causal_urpe_attention  # noqa: E402
from fairseq_urpe.kernels.reference import causal_urpe_attention_reference  # noqa: E402
from tests.attention_builders import EMBED, HEADS, make_t5_attention  # noqa: E402
from tests.kernels.kernel_inputs import make_inputs  # noqa: E402
from tests.reference import causal_mask  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_fused_dropout_equals_the_reference_fed_the_kernels_mask_forward_and_backward():
    q, k, v, bias, c, pad = make_inputs(2, 3, 37, 16, torch.float64, padding="left", seed=6)
    seed = torch.tensor([987654321987], dtype=torch.int64)
    mask = attention_dropout_mask(seed, 2, 3, 37, 0.3)  # (B, H, T, T): 0 or 256 / (256 - round(0.3 * 256))
    values = mask.unique()
    assert len(values) == 2 and values[0] == 0 and values[1].item() == pytest.approx(256 / 179, rel=1e-7)
    out = fused_causal_urpe_attention(q, k, v, bias, c, pad, 0.25, dropout_p=0.3, dropout_seed=seed)
    want = causal_urpe_attention_reference(q, k, v, bias, c, pad, 0.25, dropout_mask=mask)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-11)
    leaves = {"q": q, "k": k, "v": v, "bias table": bias, "Toeplitz table": c}
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, list(leaves.values()), upstream)
    expected = torch.autograd.grad(want, list(leaves.values()), upstream)
    for name, g, e in zip(leaves, got, expected):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-11, msg=lambda m: f"gradient of the {name}: {m}")
    # Without the mask the outputs differ: dropout really acted.
    assert not torch.allclose(out, causal_urpe_attention_reference(q, k, v, bias, c, pad, 0.25))


def stated_rates():
    """The rate and kept-entry scale the docs state for the recipe's attention dropout 0.1 (the flag's
    help, the WikiText-103 README) and for 0.3 (the kernel's dropout_rate module)."""
    from fairseq_urpe.models.relative_position_config import RelativePositionConfig

    help_text = " ".join(RelativePositionConfig.__dataclass_fields__["urpe_attention_impl"].metadata["help"].split())
    with open(os.path.join(REPO, "examples", "wikitext103", "README.md")) as f:
        readme = " ".join(f.read().split())
    return {0.1: (help_text, readme, dropout_rate.__doc__), 0.3: (dropout_rate.__doc__,)}


@pytest.mark.parametrize("p", [0.001, 0.01, 0.1, 0.3, 0.77])
def test_dropout_runs_at_the_stated_8_bit_rate_or_the_dense_path_runs_it(p, monkeypatch, caplog):
    """Where the 8-bit rate t / 256 (t = round(256 p)) is within 10% of p, the kernel keeps an entry with
    probability (256 - t) / 256 (binomial bound, five standard deviations) and scales it by exactly the
    inverse, so E[Z] = 1; the docs state that rate. Elsewhere (0.001 would be no dropout, 0.01 would be
    0.0117) auto takes the dense path and logs why, fused and the kernel refuse naming the rate, and the
    dense path drops at p (never 0)."""
    effective = dropout_rate.effective_rate(p)
    x = torch.zeros(2, 3, 6, 16, dtype=torch.float64)
    monkeypatch.setattr(dispatch, "_LOGGED", set())
    if abs(effective - p) > 0.1 * p:
        with caplog.at_level(logging.INFO, logger=dispatch.__name__):
            assert attention_backend("auto", x, causal_mask(6), False, False, p) is None
        lines = [r.getMessage() for r in caplog.records]
        assert [line for line in lines if f"attention dropout {p:g} (--attention-dropout) would run at" in line
                and "the dense attention runs it at the rate asked" in line], lines
        with pytest.raises(RuntimeError, match=rf"--urpe-attention-impl fused cannot run here: attention dropout "
                                               rf"{p:g} \(--attention-dropout\) would run at"):
            attention_backend("fused", x, causal_mask(6), False, False, p)
        with pytest.raises(ValueError, match="more than 10% from the rate asked"):
            fused_causal_urpe_attention(x, x, x, dropout_p=p)
        attn = make_t5_attention("urpe_unique", seed=3, dropout=p).train()
        n = 10**6
        dropped = (attn.dropout_module(torch.ones(n, dtype=torch.float64)) == 0).double().mean().item()
        assert abs(dropped - p) < 5 * (p * (1 - p) / n) ** 0.5 and dropped > 0
        return
    threshold, keep_scale = kernel.dropout_keep(p)
    assert threshold == round(256 * p) and keep_scale * (256 - threshold) / 256 == pytest.approx(1.0, abs=1e-15)
    for text in stated_rates().get(p, ()):
        assert f"{effective:.4f}" in text and f"{keep_scale:.4f}" in text, text
    with caplog.at_level(logging.INFO, logger=dispatch.__name__):
        for _ in range(2):
            assert attention_backend("fused", x, causal_mask(6), False, False, p)
    stated = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fused attention: attention dropout")]
    assert stated == [f"fused attention: attention dropout {p:g} runs at {threshold}/256 = {effective:.4f}, "
                      f"kept entries x {keep_scale:.4f}"], stated
    z = attention_dropout_mask(torch.tensor([31337]), 2, 2, 192, p).double()  # (B, H, T, T)
    kept = (z > 0).double()
    keep = 1 - effective
    n = z.numel()
    assert abs(kept.mean().item() - keep) < 5 * (keep * (1 - keep) / n) ** 0.5  # five standard deviations
    assert torch.all((z == 0) | (z == torch.tensor(keep_scale, dtype=torch.float32).double()))
    z_std = keep_scale * (keep * (1 - keep)) ** 0.5  # of one entry
    assert abs(z.mean().item() - 1.0) < 5 * z_std / n ** 0.5
    # Every byte position of a Philox call draws alike: the keep rate per key position mod 16 agrees.
    per_position = kept.reshape(-1, 192 // 16, 16).mean((0, 1))
    assert (per_position - keep).abs().max().item() < 5 * (keep * (1 - keep) / (n / 16)) ** 0.5


def test_dropout_mask_keeps_one_minus_p_independently_and_follows_the_seed():
    p, batch, heads, length = 0.25, 2, 3, 160  # 0.25 = 64 / 256: on the 8-bit grid
    mask = attention_dropout_mask(torch.tensor([5]), batch, heads, length, p) > 0  # (B, H, T, T) kept
    n = mask.numel()
    tolerance = 5 * (p * (1 - p) / n) ** 0.5  # five standard deviations
    assert abs(mask.double().mean().item() - (1 - p)) < tolerance
    # Neighbouring keys (which share a Philox call) and neighbouring queries are uncorrelated.
    x = mask.double() - mask.double().mean()
    for a, b in ((x[..., :-1], x[..., 1:]), (x[..., :-1, :], x[..., 1:, :])):
        corr = (a * b).mean() / (a.std() * b.std())
        assert abs(corr.item()) < 5 / a.numel() ** 0.5
    # Each head and sequence has its own mask; another seed gives another one, the same seed the same.
    flat = mask.reshape(batch * heads, -1)
    assert all(not torch.equal(flat[i], flat[j]) for i in range(len(flat)) for j in range(i))
    small = attention_dropout_mask(torch.tensor([5]), 1, 1, 40, p)
    assert torch.equal(small, attention_dropout_mask(torch.tensor([5]), 1, 1, 40, p))
    assert not torch.equal(small, attention_dropout_mask(torch.tensor([6]), 1, 1, 40, p))


def philox_4x32_7(counters, key):
    """Random123's Philox-4x32 with 7 rounds, on numpy uint32 arrays: ``counters`` (4, ...), ``key`` (2,)."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in counters)
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    low = np.uint64(0xFFFFFFFF)
    for _ in range(7):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2  # exact: 32 x 32 bits in 64
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & low, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & low
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & low, (k1 + np.uint64(0xBB67AE85)) & low
    return c0, c1, c2, c3


@pytest.mark.every_triton  # also under the second triton (scripts/test.sh): triton's random numbers
@pytest.mark.parametrize("seed", [987654321987, 2**62 - 12345])
def test_dropout_mask_is_philox_4x32_7_at_the_documented_counters(seed):
    """Against Random123's Philox written out here: entry (i, j) of head bh draws byte j % 4 of word
    (j % 16) // 4 of the call at counters (j // 16, i, bh, 0), key (seed's low 32 bits, its high ones)."""
    batch, heads, length, p = 2, 3, 37, 0.3
    z = attention_dropout_mask(torch.tensor([seed]), batch, heads, length, p).reshape(batch * heads, length, length)
    bh, i, j = np.meshgrid(np.arange(batch * heads), np.arange(length), np.arange(length), indexing="ij")
    words = philox_4x32_7((j // 16, i, bh, np.zeros_like(j)), (seed & 0xFFFFFFFF, seed >> 32))
    word = np.choose((j % 16) // 4, words)
    uniform = (word >> (8 * (j % 4)).astype(np.uint64)) & np.uint64(0xFF)
    threshold, keep_scale = kernel.dropout_keep(p)
    want = np.where(uniform >= threshold, np.float32(keep_scale), np.float32(0.0))
    np.testing.assert_array_equal(z.numpy(), want)


def test_seed_comes_from_torchs_generator():
    q, k, v, bias, c, _ = make_inputs(1, 2, 20, 16, torch.float64, seed=7)
    outs = []
    for manual_seed in (11, 11, 12):
        torch.manual_seed(manual_seed)
        outs.append(fused_causal_urpe_attention(q, k, v, bias, c, dropout_p=0.5).detach())
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])


def test_attention_module_fused_dropout_equals_its_dense_path_fed_the_same_mask(monkeypatch):
    """The module in training: the fused path with the kernel's mask equals the dense path (fairseq's
    dropout module) when torch's dropout draws exactly that mask."""
    length, batch, drop = 21, 2, 0.25
    seed = torch.tensor([424242], dtype=torch.int64)
    mask = attention_dropout_mask(seed, batch, HEADS, length, drop)
    monkeypatch.setattr(kernel, "new_dropout_seed", lambda device: seed.to(device))

    def dropout_with_the_kernels_mask(x, p=0.5, training=True, inplace=False):
        assert training and p == drop and x.shape == mask.shape
        return x * mask.to(x.dtype)

    x = torch.randn(length, batch, EMBED, dtype=torch.float64, requires_grad=True)
    padding = torch.zeros(batch, length, dtype=torch.bool)
    padding[1, :2] = True
    upstream = torch.randn(length, batch, EMBED, dtype=torch.float64)
    results = []
    for impl in ("fused", "dense"):
        attn = make_t5_attention("urpe_unique", seed=3, dropout=drop)
        attn.attention_impl = impl
        attn.train()
        with monkeypatch.context() as patch:
            if impl == "dense":
                patch.setattr(torch.nn.functional, "dropout", dropout_with_the_kernels_mask)
            out = attn(x, x, x, key_padding_mask=padding, attn_mask=causal_mask(length), need_weights=False)[0]
        results.append((out, torch.autograd.grad(out, [x] + list(attn.parameters()), upstream)))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-10, atol=1e-10)
    names = ["x"] + [n for n, _ in attn.named_parameters()]
    for name, got, want in zip(names, results[0][1], results[1][1]):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10, msg=lambda m: f"gradient of {name}: {m}")
