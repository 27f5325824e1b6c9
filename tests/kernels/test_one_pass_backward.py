"""The one-pass backward (tiles with ``backward="one_pass"``): FlashAttention-2's shape, the dK/dV program looping
over query tiles adds every tile's dQ and its table gradients by atomics, and no dQ kernel runs.

Forward and every gradient against the dense expansion of test_far_tiles.py in float64 under Triton's
interpreter, with far tiles, tables that reach T, rectangular tiles both ways, padding, dropout and frozen
tables; the deterministic switch takes the split backward without atomics instead.
"""

import pytest
import torch

pytest.importorskip("triton")

from fairseq_urpe.kernels import fused_urpe_attention as kernel  # noqa: E402
from fairseq_urpe.kernels.tiles import INTERPRETER_BLOCKS, far_share_fits, one_pass  # noqa: E402
from tests.kernels.test_deterministic_backward import atomics, run_and_compare  # noqa: E402,F401  (fixture)

ONE_PASS = dict(backward="one_pass")
SHAPES = {
    "default": ONE_PASS,
    "tall_keys": dict(ONE_PASS, dkdv=(16, 32, 1)),  # programs of 32 keys, tiles of 16 queries
    "tall_queries": dict(ONE_PASS, dkdv=(32, 16, 1), forward=(32, 16, 1)),
}


@pytest.fixture
def no_dq_kernel(monkeypatch):
    """The dQ kernel raises if launched."""
    class Refused:
        def __getitem__(self, grid):
            raise AssertionError("the dQ kernel ran")

    monkeypatch.setattr(kernel, "dq_kernel", Refused())


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("length,n_bias,n_c", [(77, 20, 33), (133, 9, 1), (45, 45, 45)],
                         ids=["far_tiles", "c_one_entry", "tables_reach_t"])
def test_one_pass_backward_matches_the_dense_expansion(length, n_bias, n_c, shape, no_dq_kernel):
    run_and_compare(length, n_bias, n_c, SHAPES[shape], seed=length, deterministic=False)


def padded_with_dropout(frozen=()):
    run_and_compare(90, 33, 12, SHAPES["tall_keys"], padding=True, dropout_p=0.25, seed=5, frozen=frozen,
                    deterministic=False)


@pytest.mark.every_triton  # also under the second triton (scripts/test.sh)
def test_one_pass_backward_with_padding_and_dropout(no_dq_kernel):
    padded_with_dropout()


@pytest.mark.parametrize("frozen", [("b",), ("c",)], ids=["b_frozen", "c_frozen"])
def test_one_pass_backward_with_a_frozen_table(frozen, no_dq_kernel):
    padded_with_dropout(frozen)


def test_one_pass_with_one_table_alone_and_no_table(no_dq_kernel):
    run_and_compare(70, 17, 0, ONE_PASS, seed=8, deterministic=False)
    run_and_compare(70, 0, 17, SHAPES["tall_queries"], seed=9, deterministic=False)
    run_and_compare(40, 0, 0, ONE_PASS, seed=10, deterministic=False)


def test_one_pass_adds_by_atomics_keeps_no_far_share_and_yields_to_the_deterministic_switch(atomics):
    """The one-pass backward sums its far tiles' table gradients itself (no far share stored by the forward);
    under ``deterministic`` the split backward without atomics runs instead, right."""
    cfg = {**INTERPRETER_BLOCKS, **ONE_PASS}
    assert one_pass(cfg) and not far_share_fits(cfg, True, False)
    assert far_share_fits(INTERPRETER_BLOCKS, True, False)
    run_and_compare(77, 20, 33, ONE_PASS, seed=3, deterministic=False)
    assert atomics
    atomics.clear()
    run_and_compare(77, 20, 33, ONE_PASS, seed=3, deterministic=True)
    assert atomics == []
    with pytest.raises(ValueError, match="backward must be 'split' or 'one_pass'"):
        one_pass({"backward": "fused"})
