import argparse
import sys

import pytest
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

from fairseq_urpe.models.relative_transformer_lm import RelativeTransformerLanguageModel
from fairseq_urpe.modules import RelativeMultiheadAttention
from tests.capabilities import needs_cpu_float16
from tests.models.checks import (
    assert_finite_normalised_distributions,
    assert_incremental_decoding_equals_full_forward,
    randomise_positions,
)

VARIANTS = {
    "rpe": ("transformer_lm_rpe_tiny",),
    "urpe_bucketed": ("transformer_lm_urpe_tiny",),
    "urpe_unique": ("transformer_lm_urpe_tiny", "--urpe-toeplitz", "unique"),
    "urpe_per_layer": ("transformer_lm_urpe_tiny", "--rpe-per-layer"),
    "urpe_with_absolute": ("transformer_lm_urpe_tiny", "--absolute-positions"),
}


def test_all_architectures_are_registered_to_the_plugin_model():
    for arch in ["transformer_lm_rpe", "transformer_lm_urpe", "transformer_lm_rpe_tiny", "transformer_lm_urpe_tiny",
                 "transformer_lm_rpe_wiki103", "transformer_lm_urpe_wiki103",
                 "transformer_lm_rpe_gpt2_small", "transformer_lm_urpe_gpt2_small"]:
        assert ARCH_MODEL_REGISTRY[arch] is RelativeTransformerLanguageModel


@pytest.mark.parametrize(
    "arch,expected",
    [
        ("transformer_lm_urpe", dict(decoder_layers=6, decoder_embed_dim=512, decoder_attention_heads=8, urpe_toeplitz="bucketed")),
        ("transformer_lm_rpe", dict(decoder_layers=6, decoder_embed_dim=512, urpe_toeplitz="none")),
        ("transformer_lm_urpe_wiki103", dict(decoder_layers=16, decoder_embed_dim=1024, adaptive_input=True,
                                             tie_adaptive_weights=True, adaptive_softmax_cutoff="20000,60000",
                                             urpe_toeplitz="bucketed")),
        ("transformer_lm_rpe_gpt2_small", dict(decoder_layers=24, decoder_embed_dim=1024, activation_fn="gelu",
                                               urpe_toeplitz="none")),
    ],
)
def test_presets_set_fairseq_sizes(arch, expected):
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    for key, value in expected.items():
        assert getattr(args, key) == value, key


def test_built_models_use_relative_attention_and_no_absolute_embeddings(build_lm):
    rpe, _ = build_lm("transformer_lm_rpe_tiny")
    urpe, cfg = build_lm("transformer_lm_urpe_tiny")
    for model in (rpe, urpe):
        assert isinstance(model, RelativeTransformerLanguageModel)
        assert model.decoder.embed_positions is None
        assert all(isinstance(layer.self_attn, RelativeMultiheadAttention) for layer in model.decoder.layers)
    assert rpe.decoder.layers[0].self_attn.toeplitz is None
    assert urpe.decoder.layers[0].self_attn.toeplitz.parameterisation == "bucketed"
    assert cfg.model.urpe_max_distance == 15  # resolved from --tokens-per-sample 16 and saved in the config
    assert len(urpe.decoder.layers) == cfg.model.decoder_layers == 2  # restored after the parent's build
    with_absolute, _ = build_lm("transformer_lm_urpe_tiny", "--absolute-positions")
    assert with_absolute.decoder.embed_positions is not None
    # The model's own name is an arch too (fairseq registers it, with no arch function): still no APE.
    bare, _ = build_lm("relative_transformer_lm", "--decoder-layers", "1")
    assert bare.decoder.embed_positions is None
    assert bare.decoder.layers[0].self_attn.toeplitz.parameterisation == "bucketed"


def test_decoder_layers_to_keep_is_honoured(build_lm):
    model, cfg = build_lm("transformer_lm_urpe_tiny", "--decoder-layers", "3", "--decoder-layers-to-keep", "0,2")
    assert len(model.decoder.layers) == cfg.model.decoder_layers == 2


def test_position_parameters_are_shared_across_layers_unless_per_layer(build_lm):
    shared, _ = build_lm("transformer_lm_urpe_tiny", "--decoder-layers", "3")
    per_layer, _ = build_lm("transformer_lm_urpe_tiny", "--decoder-layers", "3", "--rpe-per-layer")
    first, last = shared.decoder.layers[0].self_attn, shared.decoder.layers[2].self_attn
    assert first.position_bias is last.position_bias and first.toeplitz is last.toeplitz
    heads, buckets = 4, 32
    count = lambda m: sum(p.numel() for n, p in m.named_parameters() if "position_bias" in n or "toeplitz" in n)  # noqa: E731
    assert count(shared) == 2 * heads * buckets
    assert count(per_layer) == 3 * 2 * heads * buckets
    a, b = per_layer.decoder.layers[0].self_attn, per_layer.decoder.layers[2].self_attn
    assert a.position_bias is not b.position_bias


def test_shared_parameters_survive_a_state_dict_round_trip(build_lm):
    model, _ = build_lm("transformer_lm_urpe_tiny")
    randomise_positions(model).eval()
    fresh, _ = build_lm("transformer_lm_urpe_tiny")
    fresh.load_state_dict(model.state_dict())
    fresh.eval()
    assert fresh.decoder.layers[0].self_attn.position_bias is fresh.decoder.layers[1].self_attn.position_bias
    tokens = torch.randint(4, 40, (2, 10))
    assert torch.equal(model(tokens)[0], fresh(tokens)[0])


def test_a_dot_product_checkpoint_loaded_dot_product_free_is_refused_naming_the_setting(build_lm):
    """``--model-overrides "{'dot_product_free': True}"`` on a ``Q K^T`` checkpoint: refused by the position
    record naming the setting and both values; a state dict without the record (an older checkpoint) is
    refused by fairseq's strict load, which reports the q/k projections instead of dropping them silently."""
    trained, _ = build_lm("transformer_lm_urpe_tiny")
    dot_product_free, _ = build_lm("transformer_lm_urpe_tiny", "--dot-product-free")
    assert not any("q_proj" in name or "k_proj" in name for name in dot_product_free.state_dict())
    with pytest.raises(ValueError, match="--dot-product-free: the checkpoint's False, this model's True"):
        dot_product_free.load_state_dict(trained.state_dict(), strict=True)
    unrecorded = {k: v for k, v in trained.state_dict().items() if not k.endswith("position_settings")}
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\) in state_dict: .*decoder\.layers\.0\.self_attn\.k_proj\.weight"):
        dot_product_free.load_state_dict(unrecorded, strict=True)
    # and back: a dot-product-free checkpoint lacks the projections a Q K^T model needs
    unrecorded = {k: v for k, v in dot_product_free.state_dict().items() if not k.endswith("position_settings")}
    with pytest.raises(RuntimeError, match=r"Missing key\(s\) in state_dict: .*self_attn\.k_proj\.weight"):
        trained.load_state_dict(unrecorded, strict=True)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_incremental_decoding_equals_full_forward_with_beam_reorder(build_lm, variant):
    model, _ = build_lm(*VARIANTS[variant])
    assert_incremental_decoding_equals_full_forward(randomise_positions(model).double().eval(), [1, 1, 2])


@pytest.mark.parametrize("variant", ["rpe", "urpe_bucketed", "urpe_unique"])
@pytest.mark.parametrize("factor", [2, 4])
def test_inputs_longer_than_training_give_finite_normalised_distributions(build_lm, variant, factor):
    model, _ = build_lm(*VARIANTS[variant], tokens_per_sample=16)
    model = randomise_positions(model).eval()
    assert model.max_positions() == sys.maxsize
    assert_finite_normalised_distributions(model, 16 * factor)


def test_unique_table_with_error_mode_refuses_longer_inputs_naming_the_option(build_lm):
    model, _ = build_lm("transformer_lm_urpe_tiny", "--urpe-toeplitz", "unique", "--urpe-beyond-max", "error",
                        "--urpe-max-distance", "20")
    assert model.max_positions() == sys.maxsize  # no bound for fairseq to skip inputs by: the table refuses
    model.eval()
    model(torch.randint(4, 40, (1, 21)))
    with pytest.raises(ValueError, match="--urpe-max-distance=20"):
        model(torch.randint(4, 40, (1, 22)))


def test_stock_absolute_positions_keep_their_length_limit(build_lm):
    model, _ = build_lm("transformer_lm_urpe_tiny", "--absolute-positions")
    assert model.max_positions() == 16


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--urpe-toeplitz", "dense"], "argument --urpe-toeplitz: invalid choice: 'dense'"),
        (["--urpe-beyond-max", "wrap"], "argument --urpe-beyond-max: invalid choice: 'wrap'"),
    ],
)
def test_unknown_choices_are_refused_by_the_parser_naming_the_option(build_lm, capsys, flags, message):
    with pytest.raises(SystemExit):
        build_lm("transformer_lm_urpe_tiny", *flags)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--rpe-num-buckets", "0"], "--rpe-num-buckets must be an integer >= 2, got 0"),
        (["--rpe-num-buckets", "-8"], "--rpe-num-buckets must be an integer >= 2, got -8"),
        (["--rpe-max-distance", "0"], "--rpe-max-distance must be greater than 16, the exact distances of the 32 buckets; got 0"),
        (["--urpe-toeplitz", "unique", "--urpe-max-distance", "0"], "--urpe-max-distance must be a positive integer, got 0"),
        (["--urpe-toeplitz", "unique", "--urpe-max-distance", "-5"], "--urpe-max-distance must be a positive integer"),
        (["--rpe-kind", "learned", "--rpe-max-distance", "0"], "--rpe-max-distance must be a positive integer, got 0"),
    ],
)
def test_impossible_sizes_are_refused_when_building_naming_the_option(build_lm, flags, message):
    with pytest.raises(ValueError, match=message):
        build_lm("transformer_lm_urpe_tiny", *flags)


@pytest.mark.parametrize("dtype", [torch.bfloat16, pytest.param(torch.float16, marks=needs_cpu_float16)])
def test_training_step_under_cpu_autocast_is_finite(build_lm, dtype):
    model, _ = build_lm("transformer_lm_urpe_tiny", "--urpe-toeplitz", "unique")
    randomise_positions(model).train()
    tokens = torch.randint(4, 40, (2, 32))
    with torch.autocast("cpu", dtype=dtype):
        logits = model(tokens)[0]
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), tokens.view(-1))
    loss.backward()
    assert logits.dtype == dtype and torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.decoder.layers[0].self_attn.toeplitz.weight.grad.abs().sum() > 0
