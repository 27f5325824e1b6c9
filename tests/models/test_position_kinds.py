"""The registry of position kinds feeds the options, the archs, the builders, the README and the tests."""

import argparse
import re
from pathlib import Path

import pytest
from fairseq import options
from fairseq.models import ARCH_CONFIG_REGISTRY

from fairseq_urpe.models.architectures import variants
from fairseq_urpe.models.position_kinds import POSITION_KINDS, SCORES, kinds_with_slopes
from fairseq_urpe.modules.rotary_embedding import RotaryEmbedding
from tests.attention_builders import BIASES

REPO = Path(__file__).resolve().parents[2]
README, USAGE = REPO / "README.md", REPO / "docs" / "usage.md"


def test_the_option_offers_exactly_the_registered_kinds(capsys):
    parser = options.get_training_parser()
    with pytest.raises(SystemExit):
        options.parse_args_and_arch(parser, ["--arch", "transformer_lm_rpe_tiny", "--user-dir", "fairseq_urpe",
                                             "--task", "language_modeling", "--rpe-kind", "?"])
    choices = re.search(r"--rpe-kind: invalid choice: '\?' \(choose from (.*)\)", capsys.readouterr().err).group(1)
    assert re.findall(r"'?(\w+)'?", choices) == list(POSITION_KINDS)


def test_every_kind_has_rpe_and_urpe_archs_and_dot_product_free_ones_where_it_can():
    table = variants()
    for name, kind in POSITION_KINDS.items():
        for part in kind.arch_parts(name):
            urpe = "urpe" if part == "rpe" else f"urpe_{part}"
            for variant in (part, urpe):
                assert table[variant]["rpe_kind"] == name
                assert (f"{variant}_dpf" in table) == kind.dot_product_free


def test_every_kind_is_checked_against_an_independent_reference():
    """A new kind needs its reference test: scores kinds in test_attention_family.BIASES, rotations here."""
    rotations_with_reference = {RotaryEmbedding}  # tests/modules/test_rotary_embedding.py
    for name, kind in POSITION_KINDS.items():
        assert name in BIASES if kind.acts_on == SCORES else kind.module in rotations_with_reference, name


def test_rope_archs_preset_the_kind_and_refuse_dot_product_free(build_lm, capsys):
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["transformer_lm_urpe_rope_wiki103"](args)
    assert (args.rpe_kind, args.urpe_toeplitz, args.decoder_layers) == ("rope", "bucketed", 16)
    with pytest.raises(ValueError, match="--rpe-kind rope acts on q and k, which --dot-product-free removes"):
        build_lm("transformer_lm_rope_tiny", "--dot-product-free")
    with pytest.raises(SystemExit):
        build_lm("transformer_lm_rope_dpf_tiny")
    assert "invalid choice: 'transformer_lm_rope_dpf_tiny'" in capsys.readouterr().err


@pytest.mark.parametrize("arch,position_parameters", [("transformer_lm_rope_tiny", 0),
                                                      ("transformer_lm_urpe_rope_tiny", 4 * 32)])
def test_rope_has_no_parameters_and_urpe_adds_c(build_lm, arch, position_parameters):
    model, _ = build_lm(arch)
    assert isinstance(model.decoder.rotary, RotaryEmbedding) and model.decoder.layers[1].self_attn.rotary is model.decoder.rotary
    assert sum(p.numel() for n, p in model.named_parameters() if "toeplitz" in n or "rotary" in n) == position_parameters


def test_slopes_message_lists_the_kinds_with_slopes(build_lm):
    assert kinds_with_slopes() == ("alibi", "log")
    with pytest.raises(ValueError, match="--rpe-slopes applies to --rpe-kind alibi or log; --rpe-kind learned has no slopes"):
        build_lm("transformer_lm_learned_tiny", "--rpe-slopes", "fixed")


def test_usage_family_table_lists_exactly_the_registered_kinds_and_their_archs():
    text = USAGE.read_text()
    section = text[text.index("## The relative-position family"):text.index("## Inspecting a trained model")]
    kinds = {re.match(r"\| `(\w+)`", line).group(1) for line in section.splitlines() if re.match(r"\| `\w+`", line)}
    assert kinds == set(POSITION_KINDS)
    for variant in variants():
        if not variant.endswith("_dpf"):
            assert f"`transformer_lm_{variant}`" in section, variant


def listed_pairs(text):
    """The variants of a hand-written ``a/b, c/d`` list: every backticked name."""
    return set(re.findall(r"`(\w+)`", text))


def test_readme_and_usage_variant_lists_are_the_registry_s():
    non_dpf = {v for v in variants() if not v.endswith("_dpf")}
    dpf_kinds = {v[: -len("_dpf")] for v in variants() if v.endswith("_dpf")}
    readme = README.read_text()
    brief = readme[readme.index("## Architectures in brief"):readme.index("## Further reading")]
    listed = listed_pairs(brief[brief.index("Variants:"):brief.index("with `_dpf`")])
    assert listed == non_dpf
    assert non_dpf - dpf_kinds == {v for v in non_dpf if "rope" in v}  # "each but RoPE with _dpf"
    assert f": {len(variants()) * 4} archs" in brief
    usage = USAGE.read_text()
    section = usage[usage.index("The variants are the position family below"):usage.index("Every `transformer_lm` option")]
    assert listed_pairs(section[: section.index("with `_dpf`")]) == non_dpf
    assert f"{len(variants())} variants x" in section


def test_architectures_docstring_lists_every_variant():
    from fairseq_urpe.models import architectures

    rows = [line.split()[0:3] for line in architectures.__doc__.splitlines() if " / " in line]
    listed = {name for row in rows for name in row if name != "/"}
    assert listed == {v for v in variants() if not v.endswith("_dpf")}


def test_baseline_lists_in_the_wikitext_recipe_are_the_registry_s():
    """run_baselines.sh reads its default ARCHS from the registry; its header and the recipe's README
    spell the list out: ``transformer_lm_{rpe,urpe,...}_wiki103``."""
    from fairseq_urpe.models.architectures import baseline_variants

    for path in (REPO / "examples" / "wikitext103" / "run_baselines.sh", REPO / "examples" / "wikitext103" / "README.md"):
        text = re.sub(r"\s+", "", re.sub(r"(?m)^#", "", path.read_text()))  # the list wraps over (comment) lines
        listed = re.search(r"transformer_lm_\{([\w,]+)\}_wiki103", text).group(1).split(",")
        assert sorted(listed) == sorted(baseline_variants()), path
        assert re.search(rf"{len(baseline_variants()) + 1}(runs|inall)", text), path


def test_the_encoder_builds_every_kind_from_the_registry_too():
    from tests.models.encoder_builders import build, tokens

    model, task = build("relative_encoder_rpe_tiny", "--rpe-kind", "rope")
    assert isinstance(model.encoder.rotary, RotaryEmbedding) and model.encoder.layers[0].self_attn.position_bias is None
    assert model(**tokens(task)["net_input"])[0].isfinite().all()


def test_the_modules_package_exports_every_kind_s_module():
    import fairseq_urpe.modules as modules

    for name, kind in POSITION_KINDS.items():
        if kind.module is not None:
            assert kind.module.__name__ in modules.__all__ and getattr(modules, kind.module.__name__) is kind.module, name
