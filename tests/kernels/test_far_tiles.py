"""Tables shorter than the sequence: near tiles read each table's last entry past its end, and far tiles
(wholly past both tables' ends) read one scalar per table and add one sum per table to its gradient.

Forward and every gradient against a dense expansion written here (``B_ij = b[min(i - j, n - 1)]``), in
float64 under Triton's interpreter, at lengths several tiles past the tables' ends.
"""

import pytest
import torch

pytest.importorskip("triton")

from fairseq_urpe.kernels import fused_urpe_attention as kernel  # noqa: E402
from fairseq_urpe.kernels import tiles  # noqa: E402
from fairseq_urpe.kernels.fused_urpe_attention import attention_dropout_mask, fused_causal_urpe_attention  # noqa: E402
from fairseq_urpe.kernels.tiles import INTERPRETER_BLOCKS, far_tiles, table_reach  # noqa: E402
from tests.kernels.kernel_inputs import assert_same_gradients  # noqa: E402


def dense(q, k, v, b, c, padding, scale, dropout_mask=None):
    """softmax(scale q k^T + B) ⊙ C ⊙ Z, then V, with every T x T matrix written out."""
    length = q.size(2)
    i = torch.arange(length)
    distance = i[:, None] - i[None, :]
    scores = scale * q @ k.transpose(2, 3)
    if b is not None:
        scores = scores + b[:, distance.clamp(0, b.size(1) - 1)]
    if padding is not None:
        scores = scores.masked_fill(padding[:, None, None, :], torch.finfo(scores.dtype).min)
    weights = scores.masked_fill(distance < 0, float("-inf")).softmax(-1)
    if c is not None:
        weights = weights * c[:, distance.clamp(0, c.size(1) - 1)]
    if dropout_mask is not None:
        weights = weights * dropout_mask
    return weights @ v


def far_tile_inputs(length, n_bias, n_c, seed, padding=False, head_dim=16):
    """q, k, v ``(2, 2, length, head_dim)``, tables of ``n_bias`` and ``n_c`` entries (0: none) and, with
    ``padding``, pads at both ends, in float64 from ``seed``."""
    torch.manual_seed(seed)
    batch, heads = 2, 2
    q, k, v = (torch.randn(batch, heads, length, head_dim, dtype=torch.float64, requires_grad=True) for _ in range(3))
    b = torch.randn(heads, n_bias, dtype=torch.float64, requires_grad=True) if n_bias else None
    c = torch.empty(heads, n_c, dtype=torch.float64).uniform_(-0.5, 2.0).requires_grad_() if n_c else None
    pad = None
    if padding:
        pad = torch.zeros(batch, length, dtype=torch.bool)
        pad[0, -4:] = True
        pad[1, :3] = True
    return q, k, v, b, c, pad


def check(length, n_bias, n_c, blocks=None, padding=False, dropout_p=0.0, seed=0, head_dim=16):
    q, k, v, b, c, pad = far_tile_inputs(length, n_bias, n_c, seed, padding, head_dim)
    batch, heads = q.shape[:2]
    seed_tensor = torch.tensor([7], dtype=torch.int64) if dropout_p else None
    out = fused_causal_urpe_attention(q, k, v, b, c, pad, scale=0.25, dropout_p=dropout_p,
                                      dropout_seed=seed_tensor, blocks=blocks)
    mask = attention_dropout_mask(seed_tensor, batch, heads, length, dropout_p).double() if dropout_p else None
    want = dense(q, k, v, b, c, pad, 0.25, mask)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-11)
    assert_same_gradients(out, want, [("q", q), ("k", k), ("v", v), ("b", b), ("c", c)], rtol=1e-10, atol=1e-11)
    return b, c


def tiles_of(length, n_bias, n_c, blocks=None):
    """Far tiles per kernel for this call (the test's own count of what the kernels loop over)."""
    cfg = dict(INTERPRETER_BLOCKS, **(blocks or {}))
    _, _, far = table_reach(length, *(torch.zeros(1, n) if n else None for n in (n_bias, n_c)))
    return {name: far_tiles(name, length, far, *cfg[name][:2]) for name in ("forward", "dkdv", "dq")}


CASES = [  # (length, bias entries, c entries, blocks)
    (77, 20, 33, None),
    (133, 9, 1, None),  # c a single entry: every distance reads it
    (96, 17, 17, dict(dq=(16, 32, 1))),  # dQ tiles that do not divide the forward's: far sums in dQ
    (90, 33, 12, dict(dkdv=(32, 16, 1), dq=(16, 32, 1), forward=(32, 16, 1))),
]


@pytest.mark.parametrize("length,n_bias,n_c,blocks", CASES)
def test_far_and_near_tiles_match_the_dense_expansion(length, n_bias, n_c, blocks):
    counts = tiles_of(length, n_bias, n_c, blocks)
    assert all(n > 0 for n in counts.values()), counts  # every kernel runs far tiles here
    check(length, n_bias, n_c, blocks)


@pytest.mark.parametrize("n_bias,n_c", [(21, 0), (0, 21)], ids=["bias_only", "toeplitz_only"])
def test_one_table_alone(n_bias, n_c):
    assert tiles_of(80, n_bias, n_c)["dq"] > 0
    check(80, n_bias, n_c, seed=1)


def test_far_tiles_with_padding_and_dropout():
    check(70, 18, 25, padding=True, dropout_p=0.25, seed=2)


def test_far_table_gradients_come_from_the_forwards_far_share_where_it_applies(monkeypatch):
    """Without padding, with the table gradients in dQ and dQ tiles dividing the forward's, the far
    tiles' table gradients come from the forward's far share (the delta kernel adds them, dQ's far loop
    skips them); otherwise from sums in dQ's far loop. Both against the dense expansion."""
    cfg, b, c = dict(INTERPRETER_BLOCKS), torch.zeros(2, 20), torch.zeros(2, 33)
    square = dict(cfg, forward=(16, 16, 1, 1))  # dQ's 32 rows span two forward tiles
    assert tiles.far_share_applies(cfg, 77, b, c) and tiles.far_share_applies(cfg, 77, None, c)
    assert not tiles.far_share_applies(cfg, 77, b, c, pad=torch.zeros(2, 77))
    assert not tiles.far_share_applies(square, 77, b, c)
    assert not tiles.far_share_applies(cfg, 40, torch.zeros(2, 64), None)  # no far tiles
    assert not tiles.far_share_applies(cfg, 77)  # no tables
    shares, delta = [], kernel.launch_delta

    def launch_delta(*args, **kwargs):
        shares.append(args[3] if len(args) > 3 else kwargs.get("far"))
        return delta(*args, **kwargs)

    monkeypatch.setattr(kernel, "launch_delta", launch_delta)
    stored, forward = [], kernel.launch_forward

    def launch_forward(*args, **kwargs):
        stored.append((args[13] if len(args) > 13 else kwargs.get("far")) is not None)
        return forward(*args, **kwargs)

    monkeypatch.setattr(kernel, "launch_forward", launch_forward)
    q, k, v = (torch.randn(1, 2, 77, 16, dtype=torch.float64) for _ in range(3))
    learned = [torch.randn(2, n, dtype=torch.float64, requires_grad=True) for n in (20, 33)]
    with torch.no_grad():  # evaluation: no backward, so no far share stored
        fused_causal_urpe_attention(q, k, v, *learned, scale=0.25)
    fused_causal_urpe_attention(q, k, v, *(t.detach() for t in learned), scale=0.25)  # tables frozen
    assert stored == [False, False]
    check(77, 20, 33, seed=4)
    check(77, 20, 33, dropout_p=0.25, seed=5)  # Z inside the share
    check(77, 20, 33, blocks=square, seed=6)
    check(77, 20, 33, padding=True, seed=7)
    assert [share is not None for share in shares] == [True, True, False, False]
    assert stored[2:] == [True, True, False, False]
    assert all(share.row_sum.gt(0).any() for share in shares[:2])  # rows with far keys


def test_tables_longer_than_the_sequence_read_only_their_first_t_entries():
    b, c = check(40, 64, 50, seed=3)
    assert table_reach(40, b, c) == (39, 39, 39)  # no far tiles: the last distance is 39


def test_far_tile_counts_match_an_enumeration_of_the_tiles():
    """``far_tiles`` against every (query tile, key tile) pair tested one by one."""
    for length, far, block_m, block_n in [(2048, 127, 128, 64), (77, 19, 16, 16), (90, 32, 32, 16), (50, 60, 16, 32)]:
        pairs = [(m, n) for m in range(0, length, block_m) for n in range(0, length, block_n)]
        wholly_far = sum(1 for m, n in pairs if m - (n + block_n - 1) >= far)
        for name in ("forward", "dq"):
            assert far_tiles(name, length, far, block_m, block_n) == wholly_far
        assert far_tiles("dkdv", length, far, block_m, block_n) == wholly_far


def test_far_tiles_are_most_tiles_at_2048_with_128_entries():
    """The case the path is for: 128-entry tables at T = 2048 with the sm_90 tiles. 88% of the causal
    entries lie at distances >= 127; whole tiles past it are 77% (tiles of 128 x 64 or 32 x 128
    entries) to 82% (64 x 32, 16 x 64)."""
    for head_dim in (64, 128):
        for name in ("forward", "dkdv", "dq"):
            block_m, block_n = tiles.GPU_BLOCKS["sm_90", "16-bit", head_dim][name][:2]
            causal = sum(1 for m in range(0, 2048, block_m) for n in range(0, 2048, block_n) if n <= m + block_m - 1)
            assert 0.77 < far_tiles(name, 2048, 127, block_m, block_n) / causal < 0.83, (head_dim, name)


def test_the_performance_model_prices_far_near_and_diagonal_tiles_by_their_own_loops():
    from benchmarks.gpu_check.prediction import MODEL_FAR, iterations, kernel_cycles
    from fairseq_urpe.modules import T5RelativeBias, ToeplitzReweighting

    # the default transformer_lm_urpe: T5 buckets (32, up to 128) for b, and C on the same buckets
    assert MODEL_FAR == T5RelativeBias(1, 32, 128).constant_from == ToeplitzReweighting(1, "bucketed", 32, 128).constant_from
    loops = [{"instructions": n} for n in (400, 800, 1200)]  # in PTX order
    for name, roles in (("dq", ("far", "near", "on")), ("dkdv", ("on", "near", "far"))):
        block_m, block_n, warps = 64, 32, 4  # issue-bound at these counts: cycles = warps x instructions / 4
        cost = {role: warps * loop["instructions"] / 4 for role, loop in zip(roles, loops)}
        below, on = iterations(name, block_m, block_n)
        far = far_tiles(name, 2048, MODEL_FAR, block_m, block_n)
        assert 0 < far < below
        want = far * cost["far"] + (below - far) * cost["near"] + on * cost["on"]
        assert kernel_cycles(name, {"tiles": (block_m, block_n, warps), "loops": loops}, MODEL_FAR, count="ptx") == want


def test_the_model_prices_the_one_pass_dkdv_with_dq_on_every_tile():
    """A one-pass dK/dV entry (``one_pass``) costs, per tile of every kind, dQ's product (5 instead of 4) and
    dQ's float32 atomics, and near tiles both tables' diagonal sums; tensor-bound here, so the product shows."""
    from benchmarks.gpu_check.prediction import (L2_BYTES_PER_SM_CYCLE, TENSOR_FLOP_PER_CYCLE, iterations, kernel_cycles,
                                                 loop_bytes)

    usage = {"tiles": (16, 64, 4), "sass": {"loops": [{"instructions": 4} for _ in range(3)]}}
    single = dict(usage, one_pass=True)
    for role in ("far", "near", "on"):
        assert loop_bytes("dkdv", role, usage, 64)[1] == 0
        assert loop_bytes("dkdv", role, single, 64)[1] == 4 * 16 * 64 + (0 if role == "far" else 2 * (16 + 64 - 1) * 4)
    # without the L2 term every tile is tensor-bound at these counts: 5 products against 4
    split, one = (kernel_cycles("dkdv", u, 113, scenario="no L2") for u in (usage, single))
    assert one == pytest.approx(split * 5 / 4)
    below, on = iterations("dkdv", 16, 64)
    assert split == pytest.approx((below + on) * 4 * 2 * 16 * 64 * 64 / TENSOR_FLOP_PER_CYCLE)
    # with it, the atomics' bytes count where the loads do
    loaded = 2 * 16 * 64 * 2 + 3 * 16 * 4
    far = far_tiles("dkdv", 2048, 113, 16, 64)
    near_bytes = loaded + 2 * (16 + 64 - 1) * 4
    want = far * (loaded + 4 * 16 * 64) + (below - far + on) * (near_bytes + 4 * 16 * 64 + 2 * (16 + 64 - 1) * 4)
    assert kernel_cycles("dkdv", single, 113, scenario="model") == pytest.approx(want / L2_BYTES_PER_SM_CYCLE)


class _LaunchSpy:
    """Stands in for a Triton kernel in the kernel module: records each launch's keyword arguments."""

    def __init__(self, fn):
        self.fn, self.launches = fn, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append(kwargs)
            return self.fn[grid](*args, **kwargs)

        return launch


def test_far_tiles_dq_comes_from_the_dkdv_kernel_where_it_fits(monkeypatch):
    """With the far share and ``far_dq="dkdv"`` (the default), dK/dV's far tiles on ``far_dq_grid`` add
    their dQ to a float32 sum that dQ's kernel reads; dQ runs the forward's other far tiles and the near
    ones. Against the dense expansion (float64), with and without dropout, and with ``far_dq="dq"``."""
    cfg, b, c = dict(INTERPRETER_BLOCKS), torch.zeros(2, 9), torch.zeros(2, 1)
    assert cfg["far_dq"] == "dkdv" and tiles.far_dq_fits(cfg)
    assert tiles.far_dq_fits(dict(cfg, forward=(16, 16, 1, 1)))  # dK/dV's 16 query rows divide 16
    assert not tiles.far_dq_fits(dict(cfg, forward=(16, 16, 1, 1), dkdv=(32, 32, 1, 1)))  # 32 do not
    assert not tiles.far_dq_fits(dict(cfg, far_dq="dq"))
    grid = tiles.far_dq_grid(cfg)
    assert grid == (32, 32)  # the forward's 32 queries by dK/dV's 32 keys
    length, far = 97, table_reach(97, b, c)[2]  # 4 far dK/dV tiles; dQ skips 6 of its 9 far tiles
    fm, fn = cfg["forward"][:2]
    # dK/dV adds dQ for some far tiles, and dQ's far loop still has some of the forward's far tiles left
    dkdv_far = far_tiles("dkdv", length, far, *cfg["dkdv"][:2], grid)
    dq_far, dq_skipped = (far_tiles("dq", length, far, *cfg["dq"][:2], g) for g in ((fm, fn), grid))
    assert dkdv_far > 0 and 0 < dq_skipped < dq_far
    spy = _LaunchSpy(kernel.dkdv_kernel)
    monkeypatch.setattr(kernel, "dkdv_kernel", spy)
    check(length, 9, 1, seed=8)
    check(length, 9, 1, dropout_p=0.25, seed=9)
    check(length, 9, 1, blocks=dict(far_dq="dq"), seed=10)
    check(length, 9, 1, padding=True, seed=11)  # no far share: no far dQ in dK/dV
    assert [launch["FAR_DQ"] for launch in spy.launches] == [True, True, False, False]
    assert (spy.launches[0]["FAR_M"], spy.launches[0]["FAR_N"]) == grid


def test_far_tile_counts_on_a_grid_match_an_enumeration_of_the_tiles():
    """``far_tiles`` on a grid ``(FAR_M, FAR_N)`` against every (query tile, key tile) pair tested one by
    one: far where its keys lie in the whole FAR_N-blocks at ``j <= q0 - FAR`` for ``q0`` its FAR_M-block's
    first row (``score_tiles.key_tile_ranges``)."""
    cases = [(2048, 113, (128, 128), {"forward": (128, 64), "dq": (64, 32), "dkdv": (32, 128)}),
             (333, 8, (32, 32), {"forward": (32, 16), "dq": (32, 16), "dkdv": (16, 32)}),
             (150, 0, (64, 32), {"forward": (64, 32), "dq": (16, 32), "dkdv": (16, 32)})]
    for length, far, (gm, gn), tiles in cases:
        for name, (block_m, block_n) in tiles.items():
            pairs = [(m, n) for m in range(0, length, block_m) for n in range(0, length, block_n)]
            want = sum(1 for m, n in pairs if n + block_n <= max((m // gm) * gm - far + 1, 0) // gn * gn)
            assert far_tiles(name, length, far, block_m, block_n, (gm, gn)) == want, (length, name)


def test_the_model_runs_no_dq_far_tile_whose_dq_the_dkdv_kernel_added():
    from benchmarks.gpu_check.prediction import iterations, kernel_cycles

    reach = 40  # where the forward's far keys (whole 64-blocks) and dK/dV's (128-blocks) differ

    loops = [{"instructions": n} for n in (400, 800, 1200)]  # dQ's far / near / on-diagonal loops
    block_m, block_n, warps = 64, 32, 4
    usage = {"tiles": (block_m, block_n, warps), "loops": loops, "far_share": [128, 64], "far_dq_grid": [128, 128]}
    below, on = iterations("dq", block_m, block_n)
    far = far_tiles("dq", 2048, reach, block_m, block_n, (128, 64))
    skipped = far_tiles("dq", 2048, reach, block_m, block_n, (128, 128))
    assert 0 < skipped < far < below
    want = (far - skipped) * 400 + (below - far) * 800 + on * 1200
    assert kernel_cycles("dq", usage, reach, count="ptx") == want
    dkdv = {"tiles": (32, 128, 8), "loops": loops, "far_dq_grid": [128, 128]}  # dK/dV: on / near / far
    below, on = iterations("dkdv", 32, 128)
    far = far_tiles("dkdv", 2048, reach, 32, 128, (128, 128))
    assert 0 < far < far_tiles("dkdv", 2048, reach, 32, 128)  # the grid's tiles: fewer than its own
    assert kernel_cycles("dkdv", dkdv, reach, count="ptx") == 2 * (far * 1200 + (below - far) * 800 + on * 400)
