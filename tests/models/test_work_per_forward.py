"""Work that depends only on the configuration runs once per model and device, never per forward: counted
over training forwards and incremental decoding steps of a URPE model (T5's buckets for b and for c)."""

import pytest
import torch

from fairseq_urpe.kernels import dispatch
from fairseq_urpe.modules import BucketIndex, LearnedTable
from tests.models.checks import randomise_positions
from tests.models.conftest import build_lm, dict_dir  # noqa: F401  (fixtures)


@pytest.fixture
def counted(monkeypatch):
    """Calls of what depends on the configuration only: T5's bucket formula and the search for where the buckets
    start, the tables' ``constant_from``, the dispatch's configuration part."""
    counts = {"bucket formula": 0, "bucket boundaries": 0, "constant_from": 0, "static dispatch": 0}

    def counting(name, real):
        def wrapped(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(BucketIndex, "bucket", counting("bucket formula", BucketIndex.bucket))
    monkeypatch.setattr(BucketIndex, "first_distances", counting("bucket boundaries", BucketIndex.first_distances))
    monkeypatch.setattr(LearnedTable, "constant_from",
                        property(counting("constant_from", LearnedTable.constant_from.fget)))
    monkeypatch.setattr(dispatch.StaticDispatch, "__init__",
                        counting("static dispatch", dispatch.StaticDispatch.__init__))
    return counts


def decode(model, tokens, steps):
    state = {}
    with torch.no_grad():
        for step in range(steps):
            model.decoder(tokens[:, : step + 1], incremental_state=state)


@pytest.mark.parametrize("arch", ["transformer_lm_urpe_tiny", "transformer_lm_urpe_learned_tiny"])
def test_nothing_that_depends_only_on_the_configuration_runs_per_forward_or_decoding_step(build_lm, counted, arch):  # noqa: F811
    model, _ = build_lm(arch, tokens_per_sample=32)
    tokens = torch.randint(4, 20, (2, 24))
    model.train()
    model(tokens)[0].sum().backward()  # the first forward resolves what the configuration fixes
    model.eval()
    decode(model, tokens, 2)
    first = dict(counted)
    assert first["static dispatch"] <= 2 * len(model.decoder.layers)  # per attention: training, then decoding
    model.train()
    for length in (24, 17, 24):
        model(tokens[:, :length])[0].sum().backward()
    model.eval()
    decode(model, tokens, 20)
    assert counted == first, "configuration-only work ran again"


def test_a_dtype_change_resolves_anew_and_decodes_as_the_full_forward(build_lm, counted):  # noqa: F811
    """After ``.double()`` each attention resolves its dispatch for float64 once, and incremental decoding
    still equals the full forward."""
    model, _ = build_lm("transformer_lm_urpe_tiny", tokens_per_sample=32)
    model = randomise_positions(model).eval()
    tokens = torch.randint(4, 20, (1, 12))
    with torch.no_grad():
        model(tokens)
    before = counted["static dispatch"]
    model.double()
    with torch.no_grad():
        full = model(tokens)[0]
        assert full.dtype == torch.float64
        assert counted["static dispatch"] == before + len(model.decoder.layers)
        state, steps = {}, []
        for step in range(tokens.size(1)):
            steps.append(model.decoder(tokens[:, : step + 1], incremental_state=state)[0][:, -1])
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("arch,tables", [("transformer_lm_rpe_tiny", 1), ("transformer_lm_urpe_tiny", 2)])
def test_decoding_steps_slice_tables_made_once_for_the_modules_values(build_lm, monkeypatch, arch, tables):  # noqa: F811
    """Without gradients, a decoding step reads b's (and URPE's c's) table and its (H, 1, S) row as views of
    tables made once (fairseq_urpe/modules/decoding_rows.py): no expansion per step, each module evaluated
    once for all steps and layers. A change of b's values (through ``.data``, as fairseq's FP16 optimizer
    writes them, leaving the version counter alone) makes them again at the next step; a longer prefix than
    they hold too. Decoding equals the full forward before and after."""
    from fairseq_urpe.modules import decoding_rows, position_tables

    expanded, evaluated = [], []
    expand = position_tables.expand_by_distance
    monkeypatch.setattr(position_tables, "expand_by_distance", lambda *args: expanded.append(1) or expand(*args))
    monkeypatch.setattr(decoding_rows, "FIRST_LENGTH", 4)  # a prefix longer than the first tables: made again
    model, _ = build_lm(arch, tokens_per_sample=32)
    model = randomise_positions(model).double().eval()
    modules = [m for m in (model.decoder.position_bias, getattr(model.decoder, "toeplitz", None)) if m is not None]
    assert len(modules) == tables and len(model.decoder.layers) >= 2
    for module in modules:
        by_distance = module.by_distance
        monkeypatch.setattr(module, "by_distance", lambda d, f=by_distance: evaluated.append(d.numel()) or f(d))
    tokens = torch.randint(4, 20, (2, 9))

    def decode_all():
        with torch.no_grad():
            full = model(tokens)[0]
            expanded.clear(), evaluated.clear()
            state, steps = {}, []
            for step in range(tokens.size(1)):
                steps.append(model.decoder(tokens[:, : step + 1], incremental_state=state)[0][:, -1])
        torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-10, atol=1e-10)

    decode_all()
    assert expanded == [] and evaluated == [4] * tables + [8] * tables + [16] * tables  # 9 positions: tables of 4, 8, 16
    decode_all()  # the same values: the tables made for the longest prefix serve every step
    assert expanded == [] and evaluated == []
    model.decoder.position_bias.weight.data.add_(0.5)  # in place, outside autograd's version counter
    decode_all()
    assert expanded == [] and evaluated == [16] * tables  # made again, as long as before


def test_decoding_tables_stop_at_the_longest_distance_a_table_accepts(build_lm):  # noqa: F811
    """A per-distance C that refuses farther distances (``--urpe-beyond-max error``) decodes every step that stays
    within it, equal to the full forward, though the tables are made ahead of the steps; the first step past it
    raises naming the option, as the full forward does."""
    model, _ = build_lm("transformer_lm_urpe_tiny", "--urpe-toeplitz", "unique", "--urpe-max-distance", "7",
                        "--urpe-beyond-max", "error", tokens_per_sample=8)
    model = randomise_positions(model).double().eval()
    tokens = torch.randint(4, 20, (2, 9))
    with torch.no_grad():
        full = model(tokens[:, :8])[0]
        state, steps = {}, []
        for step in range(8):
            steps.append(model.decoder(tokens[:, : step + 1], incremental_state=state)[0][:, -1])
        torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-10, atol=1e-10)
        with pytest.raises(ValueError, match="--urpe-max-distance=7 but the input needs 8"):
            model.decoder(tokens, incremental_state=state)
        with pytest.raises(ValueError, match="--urpe-max-distance=7 but the input needs 8"):
            model(tokens)
