"""The declarations of the position kinds and options feed the config, the archs, the option checks, the
builders, the generated table of archs (docs/architectures.md) and the tests."""

import argparse
import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from fairseq.models import ARCH_CONFIG_REGISTRY

from fairseq_urpe.models import arch_table
from fairseq_urpe.models.architectures import variants
from fairseq_urpe.models.kind_record import BY_DISTANCE, BY_POSITIONS, ROTARY, Contract, PositionKind
from fairseq_urpe.models.option_checks import config_defaults, kinds_reading
from fairseq_urpe.models.position_builders import build_position_modules
from fairseq_urpe.models.position_kinds import POSITION_KINDS, register_kind
from fairseq_urpe.models.position_options import POSITION_OPTIONS
from fairseq_urpe.models.relative_encoder import RelativeEncoderConfig
from fairseq_urpe.models.relative_transformer_lm import RelativeTransformerLanguageModelConfig
from fairseq_urpe.modules import ALiBiBias
from fairseq_urpe.modules.rotary_embedding import RotaryEmbedding
from tests.reference import BIAS_FORMULAS, PAIR_BIAS_FORMULAS, ROTATION_FORMULAS

# The reference's formulas, per contract.
FORMULAS = {BY_DISTANCE.name: BIAS_FORMULAS, BY_POSITIONS.name: PAIR_BIAS_FORMULAS, ROTARY.name: ROTATION_FORMULAS}

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
    with a module against its formula in tests/reference.py, in the table of its contract; one without a
    formula fails here by name."""
    contract = POSITION_KINDS[name].contract.name
    assert contract in FORMULAS, f"tests/reference.py has no table of formulas for the contract {contract!r}"
    assert name in FORMULAS[contract], f"tests/reference.py has no formula for --rpe-kind {name}"


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
    assert kinds_reading("rpe_slopes") == ("alibi", "log")
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


@pytest.mark.parametrize("config", [RelativeTransformerLanguageModelConfig, RelativeEncoderConfig], ids=lambda c: c.__name__)
def test_the_configs_have_each_declared_option_with_its_default_and_choices(config):
    fields = {f.name: f for f in dataclasses.fields(config)}
    for name, option in POSITION_OPTIONS.items():
        assert name in fields, name
        if not (config is RelativeEncoderConfig and name == "rpe_init"):  # the encoder starts flat
            assert fields[name].default == option.default, name
        choices = getattr(fields[name].type, "__args__", (fields[name].type,))[0]
        if option.choices is not None:
            assert [c.value for c in choices] == list(option.choices), name
    assert config_defaults(RelativeEncoderConfig)["rpe_init"] == "zero"


def test_a_declaration_reading_an_undeclared_option_or_of_an_unknown_contract_is_refused_by_name():
    with pytest.raises(ValueError, match="position kind 'bad' reads 'rpe_base', which is no option"):
        register_kind("bad", PositionKind(ALiBiBias, reads=("rpe_base",)))
    with pytest.raises(ValueError, match="position kind 'bad' takes 'width', which is none of the attention's"):
        register_kind("bad", PositionKind(ALiBiBias, shape=("width",)))
    contract = Contract("by_query", "position_bias", "by_query(...)", "scores", scores=True)  # declared nowhere
    with pytest.raises(ValueError, match="position kind 'bad' declares the contract 'by_query'; a kind's contract is"):
        register_kind("bad", PositionKind(ALiBiBias, contract=contract))
    with pytest.raises(ValueError, match="position kind 'bad' declares the contract 'by_distance', but RotaryEmbedding "
                                         "has no by_distance"):
        register_kind("bad", PositionKind(RotaryEmbedding, shape=("head_dim",)))
    with pytest.raises(ValueError, match="declares the contract 'by_positions', but ALiBiBias has by_distance"):
        register_kind("bad", PositionKind(ALiBiBias, contract=BY_POSITIONS))
    with pytest.raises(ValueError, match="position kind 't5' is already registered"):
        register_kind("t5", POSITION_KINDS["t5"])
    assert "bad" not in POSITION_KINDS


def test_a_kind_is_built_from_its_declaration_by_keyword(monkeypatch):
    """Options become their declared keywords, the kind's own default fills an option left unset, fixed
    keywords pass as they are: ``ALiBiBias(num_heads=4, learnable=...)``."""
    monkeypatch.setitem(POSITION_KINDS, "alibi_learned_test", PositionKind(
        ALiBiBias, reads=("rpe_slopes",), defaults={"rpe_slopes": "learned"}))
    cfg = SimpleNamespace(**{**config_defaults(RelativeTransformerLanguageModelConfig), "rpe_kind": "alibi_learned_test"})
    bias = build_position_modules(cfg, num_heads=4, embed_dim=32, bidirectional=False).position_bias
    assert isinstance(bias, ALiBiBias) and bias.learnable and bias.num_heads == 4
    cfg.rpe_slopes = "fixed"
    assert not build_position_modules(cfg, num_heads=4, embed_dim=32, bidirectional=False).position_bias.learnable



def test_the_contract_says_whether_the_fused_kernel_takes_a_kind():
    assert [name for name, kind in POSITION_KINDS.items() if not kind.fused_kernel] == [
        name for name, kind in POSITION_KINDS.items() if kind.contract is BY_POSITIONS] == ["fire"]
