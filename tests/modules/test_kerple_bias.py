"""KERPLE's log and power kernels: the authors' starting draws, the clamp of r1 and r2 (the gradient
passes it), and the shape of the bias. Against the dense reference with the formulas of
tests/reference.py: test_attention_family.py; through the fused kernel's tables: tests/kernels/test_dispatch.py;
every arch built, decoded and run at 3x length: tests/models; trained and scored by the tools: tests/cli."""

import math

import pytest
import torch

from fairseq_urpe.modules import KerpleBias
from tests.reference import BIAS_FORMULAS

HEADS = 2000  # enough draws to see the starting distributions


@pytest.mark.parametrize("kernel,r1_high,r2_high", [("log", 2.0, 1.0), ("power", 1.0, 2.0)])
def test_r1_and_r2_start_uniform_as_the_authors_draw_them(kernel, r1_high, r2_high):
    torch.manual_seed(0)
    bias = KerpleBias(HEADS, kernel)
    for r, high in ((bias.r1, r1_high), (bias.r2, r2_high)):
        assert r.shape == (HEADS,) and 0 <= r.min() and r.max() < high
        # U(0, high): mean high/2 and standard deviation high/sqrt(12), within 4 standard errors
        assert abs(r.mean().item() - high / 2) < 4 * high / math.sqrt(12 * HEADS)
        assert abs(r.std().item() - high / math.sqrt(12)) < 0.05 * high


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_the_bias_is_zero_at_distance_zero_falls_with_distance_and_is_symmetric(kernel):
    torch.manual_seed(1)
    bias = KerpleBias(3, kernel).double()
    table = bias.by_distance(torch.arange(-40, 41))  # (H, 81)
    assert table.dtype == torch.float64 and (table[:, 40] == 0).all()
    assert (table[:, 41:] < table[:, 40:-1]).all()  # strictly falling with the distance
    torch.testing.assert_close(table, table.flip(-1), rtol=0, atol=0)


@pytest.mark.parametrize("kernel,r2_bounds", [("log", (0.01, math.inf)), ("power", (0.01, 2.0))])
def test_r1_and_r2_are_read_clamped_and_their_gradient_passes_the_clamp(kernel, r2_bounds):
    bias = KerpleBias(4, kernel).double()
    with torch.no_grad():
        bias.r1.copy_(torch.tensor([-0.5, 0.005, 0.3, 1.5]))
        bias.r2.copy_(torch.tensor([0.7, -1.0, 3.0, 0.001]))
    r1, r2 = bias.coefficients()
    torch.testing.assert_close(r1, torch.tensor([0.01, 0.01, 0.3, 1.5], dtype=torch.float64))
    torch.testing.assert_close(r2, torch.tensor([0.7, 0.01, min(3.0, r2_bounds[1]), 0.01], dtype=torch.float64))
    distance = torch.arange(1, 9)
    table = bias.by_distance(distance)
    reference = torch.stack([torch.stack([BIAS_FORMULAS["kerple" if kernel == "log" else "kerple_power"](
        bias, None, h, int(d)) for d in distance]) for h in range(4)])
    torch.testing.assert_close(table, reference, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(table)
    got = torch.autograd.grad(table, [bias.r1, bias.r2], upstream)
    want = torch.autograd.grad(reference, [bias.r1, bias.r2], upstream)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
        assert (g != 0).all()  # a clamped coefficient still learns: the authors' clamp stops no gradient


def test_float16_parameters_give_a_float32_table_and_an_unknown_kernel_is_refused():
    bias = KerpleBias(2, "log").half()
    assert bias.by_distance(torch.arange(5)).dtype == torch.float32
    with pytest.raises(ValueError, match="kernel must be one of log, power; got 'exp'"):
        KerpleBias(2, "exp")
