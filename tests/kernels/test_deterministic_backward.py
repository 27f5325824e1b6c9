"""The kernel's deterministic backward (``deterministic=True``, or torch's deterministic algorithms): no atomic
anywhere, the table gradients stored as partial rows per dQ program and added up in torch in a fixed order.

Forward and every gradient against the dense expansion of test_far_tiles.py in float64 under Triton's
interpreter, with tables shorter than the sequence (far tiles), tables that reach it, rectangular tiles both
ways, padding, dropout and frozen tables. The interpreter runs programs one after another, so two runs agree
bit for bit whatever the kernel adds by atomics: what makes the GPU's runs agree is that no atomic runs,
which these tests count.
"""

import pytest
import torch

pytest.importorskip("triton")

from fairseq_urpe.kernels.fused_urpe_attention import attention_dropout_mask, fused_causal_urpe_attention  # noqa: E402
from fairseq_urpe.kernels.tiles import INTERPRETER_BLOCKS, partial_rows, table_reach, tile  # noqa: E402
from tests.kernels.kernel_inputs import assert_same_gradients  # noqa: E402
from tests.kernels.test_far_tiles import dense, far_tile_inputs as inputs  # noqa: E402

RECTANGLES = {
    "default": None,
    "dq_tall_keys": dict(dq=(16, 32, 1), far_dq="dq"),  # rows by 16 queries, partial rows of 64 entries
    "dq_tall_queries": dict(dkdv=(32, 16, 1), dq=(32, 16, 1), forward=(32, 16, 1)),
}


@pytest.fixture
def atomics(monkeypatch):
    """A list that gets one entry per atomic read-modify-write the interpreter runs (tl.atomic_add among them)."""
    from triton.runtime.interpreter import interpreter_builder

    calls = []
    original = interpreter_builder.create_atomic_rmw

    def counted(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(interpreter_builder, "create_atomic_rmw", counted)
    return calls


def run_and_compare(length, n_bias, n_c, blocks=None, padding=False, dropout_p=0.0, seed=0, frozen=(),
                    deterministic=True):
    """The fused call against the dense expansion: forward, and the gradient of every leaf that wants one."""
    q, k, v, b, c, pad = inputs(length, n_bias, n_c, seed, padding)
    for name in frozen:
        {"b": b, "c": c}[name].requires_grad_(False)
    cfg = None if blocks is None else {**INTERPRETER_BLOCKS, **blocks}
    seed_tensor = torch.tensor([11], dtype=torch.int64) if dropout_p else None
    out = fused_causal_urpe_attention(q, k, v, b, c, pad, scale=0.25, dropout_p=dropout_p, dropout_seed=seed_tensor,
                                      blocks=cfg, deterministic=deterministic)
    mask = attention_dropout_mask(seed_tensor, 2, 2, length, dropout_p).double() if dropout_p else None
    want = dense(q, k, v, b, c, pad, 0.25, mask)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-11)
    leaves = [(n, x) for n, x in (("q", q), ("k", k), ("v", v), ("b", b), ("c", c))
              if x is not None and x.requires_grad]
    assert_same_gradients(out, want, leaves, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("shape", list(RECTANGLES))
@pytest.mark.parametrize("length,n_bias,n_c", [(77, 20, 33), (133, 9, 1), (45, 45, 45)],
                         ids=["far_tiles", "c_one_entry", "tables_reach_t"])
def test_deterministic_backward_matches_the_dense_expansion(length, n_bias, n_c, shape, atomics):
    run_and_compare(length, n_bias, n_c, RECTANGLES[shape], seed=length)
    assert atomics == []


def padded_with_dropout(frozen=()):
    run_and_compare(90, 33, 12, RECTANGLES["dq_tall_keys"], padding=True, dropout_p=0.25, seed=5, frozen=frozen)


@pytest.mark.every_triton  # also under the second triton (scripts/test.sh)
def test_deterministic_backward_with_padding_and_dropout(atomics):
    padded_with_dropout()
    assert atomics == []


@pytest.mark.parametrize("frozen", [("b",), ("c",)], ids=["b_frozen", "c_frozen"])
def test_deterministic_backward_with_a_frozen_table(frozen, atomics):
    padded_with_dropout(frozen)
    assert atomics == []


def test_one_table_alone_and_no_table():
    run_and_compare(70, 17, 0, seed=8)
    run_and_compare(70, 0, 17, RECTANGLES["dq_tall_queries"], seed=9)
    run_and_compare(40, 0, 0, seed=10)


def test_the_atomic_counter_sees_the_default_backwards_atomics_and_the_switch_selects_the_deterministic_one(atomics):
    """The same call without ``deterministic`` adds its table gradients (and, where the tiles say so, the far
    tiles' dQ) by atomics, which the counter sees; ``torch.use_deterministic_algorithms(True)`` selects the
    backward without them, right, and two runs give the same gradients bit for bit."""
    run_and_compare(77, 20, 33, seed=1, deterministic=False)
    assert atomics, "the counter saw no atomic in the default backward"
    atomics.clear()

    def gradients():
        q, k, v, b, c, _ = inputs(77, 20, 33, seed=1)
        out = fused_causal_urpe_attention(q, k, v, b, c, None, scale=0.25)  # deterministic: torch's switch
        upstream = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(0))
        return torch.autograd.grad(out, (q, k, v, b, c), upstream)

    torch.use_deterministic_algorithms(True)
    try:
        run_and_compare(77, 20, 33, seed=1, deterministic=None)
        first, second = gradients(), gradients()
    finally:
        torch.use_deterministic_algorithms(False)
    assert atomics == []
    for name, one, other in zip("qkvbc", first, second):
        assert torch.equal(one, other), name


@pytest.mark.parametrize("length", [1, 16, 45, 77, 200, 513])
@pytest.mark.parametrize("reach", [1, 9, 33, 10_000])
@pytest.mark.parametrize("blocks", [dict(dq=(16, 32, 1)), dict(dq=(32, 16, 1)), dict(dq=(64, 16, 1)),
                                    dict(dq=(16, 16, 1))], ids=["16x32", "32x16", "64x16", "16x16"])
def test_partial_rows_hold_every_diagonal_offset_of_every_program(length, reach, blocks):
    """Enumerating dQ's loops as the kernel runs them (near and diagonal key tiles from ``far``, stepping by
    BLOCK_N, up to the query tile's end): every tile's row ``(start_m - start_n + L) / g`` is an integer below
    ``partial_rows - 1`` (the last row is the far tiles'), and the largest is that one exactly."""
    cfg = {**INTERPRETER_BLOCKS, **blocks}
    bm, bn = tile(cfg, "dq")[:2]
    big, small = max(bm, bn), min(bm, bn)
    far = table_reach(length, torch.zeros(1, min(reach, length)))[2]
    rows = partial_rows(cfg, length, far, (bm, bn))
    used = set()
    for start_m in range(0, length, bm):
        first = max(start_m - far + 1, 0) // bn * bn  # keys before it: far tiles
        for start_n in range(first, min(start_m + bm, length), bn):
            offset = start_m - start_n + big
            assert offset >= 0 and offset % small == 0, (start_m, start_n)
            used.add(offset // small)
    assert max(used) == rows - 2
