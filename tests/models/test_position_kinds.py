"""The registry of position kinds feeds the options, the archs, the builders, the generated table of archs
(docs/architectures.md) and the tests."""

import argparse
import re
from pathlib import Path

import pytest
from fairseq.models import ARCH_CONFIG_REGISTRY

from fairseq_urpe.models import arch_table
from fairseq_urpe.models.architectures import variants
from fairseq_urpe.models.position_kinds import POSITION_KINDS, SCORES, kinds_with_slopes
from fairseq_urpe.modules.rotary_embedding import RotaryEmbedding
from tests.reference import BIAS_FORMULAS, PAIR_BIAS_FORMULAS, ROTATION_FORMULAS

REPO = Path(__file__).resolve().parents[2]
README, USAGE, TABLE = REPO / "README.md", REPO / "docs" / "usage.md", REPO / "docs" / "architectures.md"


def test_an_unregistered_kind_is_refused_naming_the_option_and_the_registered_kinds(build_lm):
    with pytest.raises(ValueError, match=re.escape(f"--rpe-kind must be one of {', '.join(POSITION_KINDS)}; got 'xpos'")):
        build_lm("transformer_lm_urpe_tiny", "--rpe-kind", "xpos")


def test_every_kind_has_rpe_and_urpe_archs_and_dot_product_free_ones_where_it_can():
    table = variants()
    for name, kind in POSITION_KINDS.items():
        for part in kind.arch_parts(name):
            urpe = "urpe" if part == "rpe" else f"urpe_{part}"
            for variant in (part, urpe):
                assert table[variant]["rpe_kind"] == name
                assert (f"{variant}_dpf" in table) == kind.dot_product_free


@pytest.mark.parametrize("name", [name for name, kind in POSITION_KINDS.items() if kind.module is not None])
def test_every_kind_has_its_formula_in_the_reference(name):
    """The dense tests (tests/modules/test_attention_family.py, test_rotary_embedding.py) check each kind
    with a module against its formula in tests/reference.py; one without a formula fails here by name."""
    assert name in ({**BIAS_FORMULAS, **PAIR_BIAS_FORMULAS} if POSITION_KINDS[name].acts_on == SCORES else ROTATION_FORMULAS)


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


def test_the_architectures_table_is_what_the_registry_writes():
    """docs/architectures.md is ``python -m fairseq_urpe.models.arch_table``'s output for the registry as it is."""
    assert TABLE.read_text(encoding="utf-8") == arch_table.render(), (
        "docs/architectures.md is out of date: python -m fairseq_urpe.models.arch_table > docs/architectures.md")
    for name in POSITION_KINDS:
        assert f"| `{name}` |" in TABLE.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", [README, USAGE], ids=lambda p: p.name)
def test_the_docs_link_to_the_table_and_count_no_archs(path):
    text = path.read_text(encoding="utf-8")
    assert "architectures.md" in text
    assert not re.search(r"\b\d+ (archs|architectures|variants|kinds)\b", text), re.search(
        r".{0,60}\b\d+ (archs|architectures|variants|kinds)\b", text).group(0)


def test_the_architectures_docstring_points_to_the_table_and_lists_no_variant():
    from fairseq_urpe.models import architectures

    assert "docs/architectures.md" in architectures.__doc__
    assert not any(f" {v} " in architectures.__doc__ or f"`{v}`" in architectures.__doc__ for v in variants()
                   if v not in ("rpe", "urpe")), architectures.__doc__


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
