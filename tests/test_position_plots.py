"""``python -m fairseq_urpe.position_plots``: the plots it writes and the attention maps they show."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fairseq_urpe import position_plots as urpe_inspect
from tests.checkpoints import load_checkpoint

LEGACY = Path(__file__).parent / "models" / "legacy"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path):
    """(width, height) from the PNG header."""
    header = path.read_bytes()[:24]
    assert header[:8] == PNG_MAGIC, f"{path} is not a PNG"
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def test_command_line_writes_position_and_attention_plots(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "fairseq_urpe.position_plots", str(LEGACY / "urpe_bucketed.pt"), "--out", str(tmp_path / "plots"),
         "--data", str(LEGACY), "--sentence", "the said of a ."],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    written = [Path(line) for line in result.stdout.split()]
    assert [p.name for p in written] == ["positions.png", "attention_layer0.png", "attention_layer1.png"]
    for path in written:
        width, height = png_size(path)
        assert width > 400 and height > 300


def test_attention_maps_are_before_and_after_the_toeplitz_reweighting():
    model, _, task = urpe_inspect.load(LEGACY / "urpe_unique.pt", str(LEGACY))
    tokens = torch.tensor([[2, 5, 9, 4, 17, 11, 30]])
    maps = urpe_inspect.attention_maps(model, tokens)
    assert len(maps) == 2
    with torch.no_grad():
        for (before, after), layer in zip(maps, model.decoder.layers):
            c = layer.self_attn.toeplitz(torch.arange(7), torch.arange(7))  # (H, T, T)
            torch.testing.assert_close(before.sum(-1), torch.ones(2, 7))  # softmax rows
            assert (before.triu(1) == 0).all()  # causal
            torch.testing.assert_close(after, before * c)
            assert not torch.allclose(after, before)  # the trained c is not all ones


def test_rpe_model_has_no_after_map_and_plots_say_so(tmp_path):
    written = urpe_inspect.write_plots([str(LEGACY / "rpe.pt"), "--out", str(tmp_path), "--data", str(LEGACY), "--max-distance", "40"])
    assert len(written) == 3 and all(p.is_file() for p in written)
    model, _, _ = urpe_inspect.load(LEGACY / "rpe.pt", str(LEGACY))
    assert all(after is None for _, after in urpe_inspect.attention_maps(model, torch.tensor([[2, 5, 6]])))


@pytest.mark.parametrize(
    "argv,message",
    [
        (["missing.pt"], "checkpoint missing.pt does not exist"),
        ([str(LEGACY / "rpe.pt"), "--data", "/nonexistent"], "--data /nonexistent holds no dict.txt"),
        ([str(LEGACY / "rpe.pt"), "--data", str(LEGACY), "--sentence", " "], "--sentence is empty"),
        ([str(LEGACY / "rpe.pt"), "--data", str(LEGACY), "--max-distance", "0"], "--max-distance must be a positive integer"),
    ],
)
def test_bad_input_names_the_argument(tmp_path, argv, message):
    with pytest.raises(SystemExit, match=message):
        urpe_inspect.write_plots(argv + ["--out", str(tmp_path)])


def checkpoint_with(tmp_path, **model_options):
    """``urpe_unique.pt`` (trained at --tokens-per-sample 8, unique C up to distance 7) with its stored
    options changed, written under ``tmp_path``."""
    state = load_checkpoint(LEGACY / "urpe_unique.pt")
    state["cfg"]["model"].update(model_options)
    path = tmp_path / "checkpoint.pt"
    torch.save(state, path)
    return path


def test_the_plotted_distances_default_to_the_longest_the_model_was_trained_on(tmp_path):
    _, cfg, _ = urpe_inspect.load(LEGACY / "urpe_unique.pt", str(LEGACY))
    assert urpe_inspect.plotted_distance(None, cfg) == int(cfg.task.tokens_per_sample) - 1 == 7
    assert urpe_inspect.plotted_distance(40, cfg) == 40  # clamp: farther distances reuse the last entry


def test_a_c_that_refuses_farther_distances_plots_by_default_and_names_max_distance_past_it(tmp_path):
    checkpoint = checkpoint_with(tmp_path, urpe_beyond_max="error")
    written = urpe_inspect.write_plots([str(checkpoint), "--out", str(tmp_path / "plots"), "--data", str(LEGACY),
                                        "--sentence", "the said of"])
    assert [p.name for p in written] == ["positions.png", "attention_layer0.png", "attention_layer1.png"]
    with pytest.raises(SystemExit, match="--max-distance must be at most 7 for this model: .*got 8"):
        urpe_inspect.write_plots([str(checkpoint), "--out", str(tmp_path), "--data", str(LEGACY), "--max-distance", "8"])
    with pytest.raises(SystemExit, match=r"--sentence of 16 tokens \(with the leading </s>\) is too long for this model"):
        urpe_inspect.write_plots([str(checkpoint), "--out", str(tmp_path), "--data", str(LEGACY)])


from tests.models.conftest import build_lm, dict_dir  # noqa: E402,F401  (fixtures)


def test_a_bias_of_i_and_j_is_plotted_as_rows_of_a_few_query_positions(build_lm, tmp_path):
    """FIRE's b(i, j) has no single curve by distance: the plot draws b_h(i, i - k) for i = K/4, K/2, K."""
    model, _ = build_lm("transformer_lm_urpe_fire_tiny")
    bias = model.decoder.position_bias
    rows = urpe_inspect.query_rows(bias, 15)
    assert sorted(rows) == [3, 7, 15]
    with torch.no_grad():
        full = bias(torch.arange(16), torch.arange(16))  # (H, 16, 16)
    for i, values in rows.items():
        torch.testing.assert_close(values, full[:, i, : i + 1].flip(-1), rtol=1e-6, atol=1e-6)
    urpe_inspect.plot_positions(model.eval(), 15, tmp_path / "positions.png", 60)
    width, height = png_size(tmp_path / "positions.png")
    assert width > 400 and height > 100
