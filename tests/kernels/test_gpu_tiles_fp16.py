"""float16 at the GPU tile sets (sm_80, sm_86, sm_90; head dims up to 64 and up to 128) under Triton's
interpreter, forward and backward, with both tables, key padding and attention dropout, against the
float64 reference fed the kernel's dropout mask.

The tolerance is the dense float16 attention's own error on the same inputs: the reference computed
from the float16 inputs in float16's rules (scores and softmax in float32, P cast to float16 before
P V, autograd through that), measured against float64. The kernel rounds at the same places (P and dS
to float16 before their products, float32 accumulation) and in a different order, so its error is of
the same size; a kernel that is wrong (a tile, a table read or a mask out of place) is off by O(1).

bfloat16 is not tested here: Triton 3.9's interpreter gets bf16 ``tl.dot`` wrong (off by orders of
magnitude on a minimal case) while it gets fp16 right, so bf16 runs only on a GPU (the compile check
covers its code, the first GPU run its numbers).
"""

import pytest
import torch

pytest.importorskip("triton")

from fairseq_urpe.kernels import tiles  # noqa: E402
from fairseq_urpe.kernels.fused_urpe_attention import attention_dropout_mask, fused_causal_urpe_attention  # noqa: E402
from fairseq_urpe.kernels.reference import causal_urpe_attention_reference  # noqa: E402

# The kernel's error may be FACTOR times the dense float16 error (per tensor) plus FLOOR, one float16 unit
# in the last place at 1 (2^-10): what both round is ~5e-4 relative, and a different summation order
# (tiles, float32 atomics for the table gradients and far dQ) moves a result by a few such steps. On these
# inputs the kernel's error is 0.3 to 4.4 times the dense one (the largest: the bias table's gradient,
# 4e-4 against 9e-5; at sm_80 d128 dq 1.7e-3 against 6e-4).
FACTOR, FLOOR = 4.0, 2.0 ** -10
TILE_SETS = [(arch, width) for arch in ("sm_90", "sm_80", "sm_86") for width in (64, 128)]
CAPABILITY = {"sm_90": (9, 0), "sm_80": (8, 0), "sm_86": (8, 6)}
# Also under the second triton (scripts/test.sh): Hopper's tiles, the interpreter's float16 arithmetic.
TILE_PARAMS = [pytest.param(arch, width, id=f"{arch}-d{width}",
                            marks=[pytest.mark.every_triton] if arch == "sm_90" else [])
               for arch, width in TILE_SETS]


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).abs().max() / want.abs().max().clamp(min=1.0)).item()


@pytest.mark.parametrize("padding", [True, False], ids=["padding", "no_padding"])
@pytest.mark.parametrize("arch,width", TILE_PARAMS)
def test_float16_at_the_gpu_tiles_is_as_close_to_float64_as_dense_float16(arch, width, padding):
    """Without padding the forward stores the far share and, where the tiles say so, dK/dV adds the far
    tiles' dQ: the training path of a language model. With padding, the far sums in dQ."""
    blocks = tiles.gpu_blocks(width, torch.float16, capability=CAPABILITY[arch])
    head_dim = 64 if width == 64 else 80  # 80 pads to the 128-wide tiles' BLOCK_D
    length = max(blocks["forward"][0], blocks["dkdv"][1], blocks["dq"][0]) + 23  # two query and key tiles
    batch, heads, p = 1, 2, 0.1
    gen = torch.Generator().manual_seed(width + length)
    leaves64 = [torch.randn(batch, heads, length, head_dim, generator=gen, dtype=torch.float64) for _ in range(3)]
    leaves64[0] /= head_dim ** 0.5
    leaves64 += [torch.randn(heads, 20, generator=gen, dtype=torch.float64),
                 torch.rand(heads, 12, generator=gen, dtype=torch.float64) + 0.5]  # far tiles past distance 19
    pad = None
    if padding:
        pad = torch.zeros(batch, length, dtype=torch.bool)
        pad[0, :3] = True  # left padding: the first queries see only pads
        pad[0, -9:] = True  # right padding
    seed = torch.tensor([1234567], dtype=torch.int64)
    mask = attention_dropout_mask(seed, batch, heads, length, p)
    upstream = torch.randn(batch, heads, length, head_dim, generator=gen, dtype=torch.float64)

    def run(fn, dtype):
        xs = [x.to(dtype if i < 3 else torch.promote_types(dtype, torch.float32)).requires_grad_()
              for i, x in enumerate(leaves64)]
        out = fn(xs)
        return [out] + list(torch.autograd.grad(out, xs, upstream.to(out.dtype)))

    def reference(xs):
        return causal_urpe_attention_reference(*xs, pad, 1.0, mask)

    want = run(reference, torch.float64)
    dense = run(reference, torch.float16)
    fused = run(lambda xs: fused_causal_urpe_attention(*xs, pad, 1.0, p, seed, blocks=blocks), torch.float16)
    names = ["output", "dq", "dk", "dv", "d bias table", "d c table"]
    for name, got, plain, exact in zip(names, fused, dense, want):
        accepted = FACTOR * relative(plain, exact) + FLOOR
        assert relative(got, exact) <= accepted, (name, relative(got, exact), relative(plain, exact))
