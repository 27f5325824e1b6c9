"""The family's named archs through fairseq's parser: options they set, incremental decoding, long
inputs, bad flag combinations, and checkpoints written before the family existed."""

import argparse
import re
import sys
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

from fairseq_urpe.models.architectures import ARCHITECTURES, SIZES, variants
from fairseq_urpe.models.option_checks import kinds_reading
from fairseq_urpe.models.position_kinds import POSITION_KINDS
from fairseq_urpe.models.reweightings import REWEIGHTINGS
from fairseq_urpe.models.relative_transformer_lm import RelativeTransformerLanguageModel
from fairseq_urpe.modules import LearnedDistanceBias, LogBias, T5RelativeBias, ToeplitzReweighting
from tests.checkpoints import load_checkpoint
from tests.models.checks import (
    assert_finite_normalised_distributions,
    assert_incremental_decoding_equals_full_forward,
    randomise_positions,
)

LEGACY = Path(__file__).parent / "legacy"
# What each kind puts in the attention's bias slot and in its rotation slot (the registry's classes).
BIAS_CLASS = {name: kind.module if kind.contract.slot == "position_bias" and kind.module else type(None)
              for name, kind in POSITION_KINDS.items()}
ROTARY_CLASS = {name: kind.module if kind.contract.slot == "rotary" else type(None) for name, kind in POSITION_KINDS.items()}
VARIANTS = sorted(variants())


def test_naming_scheme_covers_every_kind_with_and_without_urpe_and_dot_product():
    """Per kind of the registry: its RPE and URPE variants (name parts as the registry says), each also
    ``_dpf`` unless the kind needs ``Q K^T``; every variant in every size, all of ``relative_transformer_lm``."""
    expected = {}
    for name, kind in POSITION_KINDS.items():
        for part, defaults in kind.arch_parts(name).items():
            for variant, toeplitz in ((part, "none"), ("urpe" if part == "rpe" else f"urpe_{part}", "bucketed")):
                for suffix, dpf in (("", False), ("_dpf", True)) if kind.dot_product_free else (("", False),):
                    expected[variant + suffix] = {"rpe_kind": name, **defaults, "urpe_toeplitz": toeplitz,
                                                  **({"dot_product_free": True} if dpf else {})}
    assert variants() == expected
    for variant in VARIANTS:
        for size in SIZES:
            assert ARCH_MODEL_REGISTRY[f"transformer_lm_{variant}{size}"] is RelativeTransformerLanguageModel
    assert len(ARCHITECTURES) == len(SIZES) * len(VARIANTS) and {"rpe", "urpe", "nope", "ape"} <= set(VARIANTS)


@pytest.mark.parametrize(
    "arch,expected",
    [
        ("transformer_lm_alibi", dict(rpe_kind="alibi", urpe_toeplitz="none", decoder_layers=6)),
        ("transformer_lm_urpe_log_wiki103", dict(rpe_kind="log", urpe_toeplitz="bucketed", decoder_layers=16,
                                                 adaptive_input=True)),
        ("transformer_lm_urpe_learned_dpf_tiny", dict(rpe_kind="learned", urpe_toeplitz="bucketed",
                                                      dot_product_free=True, decoder_embed_dim=64)),
        ("transformer_lm_ape_gpt2_small", dict(rpe_kind="none", absolute_positions=True, decoder_layers=24)),
    ],
)
def test_family_presets_set_position_options_and_sizes(arch, expected):
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    for key, value in expected.items():
        assert getattr(args, key) == value, key


@pytest.mark.parametrize("arch", ["transformer_lm_rpe_tiny", "transformer_lm_urpe_learned_tiny"])
def test_learned_bias_starts_at_alibis_line_by_default_and_flat_with_rpe_init_zero(build_lm, arch):
    default = build_lm(arch)[0].decoder.layers[0].self_attn.position_bias
    flat = build_lm(arch, "--rpe-init", "zero")[0].decoder.layers[0].self_attn.position_bias
    assert not flat.weight.any()
    kind = LearnedDistanceBias if "learned" in arch else T5RelativeBias
    start = kind(4, *((32, 128) if kind is T5RelativeBias else (128,)), start="alibi").weight
    assert torch.equal(default.weight, start) and (default.weight[:, 1:] < 0).all()


def test_urpe_equals_rpe_at_step_zero_with_the_alibi_start(build_lm):
    rpe, _ = build_lm("transformer_lm_rpe_tiny")
    urpe, _ = build_lm("transformer_lm_urpe_tiny")  # same seed: same draws, b at the same start, C = 1
    tokens = torch.randint(4, 40, (2, 12))
    rpe.eval(), urpe.eval()
    torch.testing.assert_close(urpe(tokens)[0], rpe(tokens)[0], rtol=0, atol=0)


def test_explicit_flags_override_the_arch(build_lm):
    model, _ = build_lm("transformer_lm_alibi_tiny", "--rpe-kind", "log", "--urpe-toeplitz", "unique")
    attn = model.decoder.layers[0].self_attn
    assert isinstance(attn.position_bias, LogBias) and attn.toeplitz.parameterisation == "unique"


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_builds_its_modules(build_lm, variant):
    model, cfg = build_lm(f"transformer_lm_{variant}_tiny")
    options = variants()[variant]
    attn = model.decoder.layers[1].self_attn
    assert isinstance(attn.position_bias, BIAS_CLASS[options["rpe_kind"]])
    assert isinstance(attn.rotary, ROTARY_CLASS[options["rpe_kind"]])
    assert isinstance(attn.toeplitz, ToeplitzReweighting) == (options["urpe_toeplitz"] == "bucketed")
    assert attn.dot_product == (not options.get("dot_product_free", False))
    assert (model.decoder.embed_positions is not None) == options.get("absolute_positions", False)


@pytest.mark.parametrize("variant", VARIANTS)
def test_incremental_decoding_equals_full_forward_with_beam_reorder(build_lm, variant):
    options = variants()[variant]
    reads = POSITION_KINDS[options["rpe_kind"]].reads + REWEIGHTINGS[options["urpe_toeplitz"]].reads
    small_tables = [flag for option in ("rpe_num_buckets", "rpe_max_distance") if option in reads
                    for flag in ("--" + option.replace("_", "-"), "8")]  # where the kind or its C reads them
    model, _ = build_lm(f"transformer_lm_{variant}_tiny", *small_tables)
    assert_incremental_decoding_equals_full_forward(randomise_positions(model).double().eval(), [2, 0, 0])


@pytest.mark.parametrize("variant", [v for v in VARIANTS if "ape" not in v])  # APE is bounded by its table
def test_three_times_the_training_length_gives_finite_normalised_distributions(build_lm, variant):
    model, _ = build_lm(f"transformer_lm_{variant}_tiny", tokens_per_sample=16)
    model = randomise_positions(model).eval()
    assert model.max_positions() == sys.maxsize
    assert_finite_normalised_distributions(model, 48)


SLOPE_KINDS = " or ".join(kinds_reading("rpe_slopes"))


@pytest.mark.parametrize(
    "arch,flags,message",
    [
        ("transformer_lm_rpe_tiny", ["--rpe-slopes", "learned"], f"--rpe-slopes applies to --rpe-kind {SLOPE_KINDS}; --rpe-kind t5 has no slopes"),
        ("transformer_lm_learned_tiny", ["--rpe-slopes", "fixed"], "--rpe-kind learned has no slopes"),
        ("transformer_lm_nope_tiny", ["--rpe-slopes", "fixed"], "--rpe-kind none has no slopes"),
        ("transformer_lm_learned_tiny", ["--rpe-max-distance", "-4"], "--rpe-max-distance must be a positive integer, got -4"),
        ("transformer_lm_urpe_alibi_tiny", ["--urpe-toeplitz", "unique", "--urpe-max-distance", "-1"],
         "--urpe-max-distance must be a positive integer, got -1"),
    ],
)
def test_bad_flag_combinations_are_refused_naming_the_option(build_lm, arch, flags, message):
    with pytest.raises(ValueError, match=message):
        build_lm(arch, *flags)


def test_unknown_slopes_are_refused_by_the_parser(build_lm, capsys):
    with pytest.raises(SystemExit):
        build_lm("transformer_lm_urpe_tiny", "--rpe-slopes", "random")
    assert "argument --rpe-slopes: invalid choice: 'random'" in capsys.readouterr().err


@pytest.mark.parametrize("slopes,learnable", [(None, True), ("fixed", False), ("learned", True)])
def test_log_slopes_default_to_learned_and_alibi_to_fixed(build_lm, slopes, learnable):
    flags = ["--rpe-slopes", slopes] if slopes else []
    log, _ = build_lm("transformer_lm_log_tiny", *flags)
    assert log.decoder.layers[0].self_attn.position_bias.learnable == learnable
    alibi, _ = build_lm("transformer_lm_alibi_tiny", *flags)
    assert alibi.decoder.layers[0].self_attn.position_bias.learnable == (slopes == "learned")


@pytest.mark.parametrize("name", ["rpe", "urpe_bucketed", "urpe_unique"])
def test_checkpoints_written_before_the_family_load_and_give_identical_outputs(name):
    """tests/models/legacy/*.pt were written by fairseq-train at commit c42afd5 (no --rpe-kind,
    --rpe-slopes or --dot-product-free in their config); expected.pt holds that code's outputs."""
    saved = torch.load(LEGACY / "expected.pt")
    models, _ = checkpoint_utils.load_model_ensemble([str(LEGACY / f"{name}.pt")], arg_overrides={"data": str(LEGACY)})
    model = models[0].eval()
    assert "rpe_kind" not in load_checkpoint(LEGACY / f"{name}.pt")["cfg"]["model"]
    attn = model.decoder.layers[0].self_attn
    assert isinstance(attn.position_bias, T5RelativeBias) and attn.dot_product
    stored = load_checkpoint(LEGACY / f"{name}.pt")["model"]
    loaded = model.state_dict()
    # Shared b and c were stored under every layer; the upgrade keeps one copy, under the decoder.
    shared = re.compile(r"decoder\.layers\.\d+\.self_attn\.((position_bias|toeplitz)\..+)")
    upgraded = {("decoder." + shared.fullmatch(k).group(1)) if shared.fullmatch(k) and name != "urpe_unique" else k: v
                for k, v in stored.items()}
    # ... marks the model as listing its parameters in that layout's order (checkpoint_upgrade.py), and
    # records its position settings (position_record.py)
    assert set(loaded) == set(upgraded) | {"decoder.position_settings"} | (
        {"decoder.per_layer_parameter_order"} if name != "urpe_unique" else set())
    assert all(torch.equal(loaded[key], upgraded[key]) for key in upgraded)
    with torch.no_grad():
        got = model.get_normalized_probs(model(saved["input"]), log_probs=True)
    # Bit-identical on the machine that wrote expected.pt; float32 tolerance because another CPU's
    # BLAS (AVX2 vs AVX-512 kernels) may round the same matmuls differently.
    torch.testing.assert_close(got, saved["log_probs"][name])
