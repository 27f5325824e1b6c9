"""The encoder archs of the expressiveness benchmarks, built through fairseq's parser and the
``position_synthetic`` task."""

import pytest
import torch
from fairseq import options

from fairseq_urpe.models.relative_encoder import ENCODER_ARCHITECTURES, ENCODER_SIZES, ENCODER_VARIANTS
from fairseq_urpe.modules import LearnedDistanceBias, ToeplitzReweighting
from tests.models.conftest import USER_DIR
from tests.models.encoder_builders import LENGTH, build, tokens

def test_every_variant_and_size_is_registered():
    assert sorted(ENCODER_ARCHITECTURES) == sorted(
        f"relative_encoder_{v}_{s}" for v in ENCODER_VARIANTS for s in ENCODER_SIZES
    )


def test_paper_size_is_a_three_layer_roberta_base_width_encoder_with_unique_rpe_and_urpe():
    parser = options.get_training_parser()
    argv = ["--task", "position_synthetic", "--arch", "relative_encoder_urpe_paper", "--user-dir", USER_DIR]
    args = options.parse_args_and_arch(parser, argv)
    assert (args.encoder_layers, args.encoder_embed_dim, args.encoder_attention_heads, args.encoder_ffn_embed_dim) == (
        3, 768, 12, 3072)
    assert (args.vocab_size, args.seq_len, args.rpe_kind, args.urpe_toeplitz) == (1000, 128, "learned", "unique")


def test_urpe_encoder_has_one_bidirectional_per_distance_bias_and_c_shared_by_all_layers():
    model, _ = build("relative_encoder_urpe_tiny")
    attns = [layer.self_attn for layer in model.encoder.layers]
    bias, c = attns[0].position_bias, attns[0].toeplitz
    assert isinstance(bias, LearnedDistanceBias) and bias.bidirectional
    assert isinstance(c, ToeplitzReweighting) and c.bidirectional and c.parameterisation == "unique"
    assert c.weight.shape == (2, 2 * (LENGTH - 1) + 1) and torch.equal(c.weight, torch.ones_like(c.weight))
    assert not bias.weight.any()  # the synthetic tasks' encoder keeps T5's flat start (--rpe-init zero)
    assert all(a.position_bias is bias and a.toeplitz is c for a in attns)
    assert model.encoder.embed_positions is None
    # Owned, listed and stored once, by the encoder (old per-layer checkpoints: test_checkpoint_upgrade.py).
    shared = [n for n, _ in model.named_parameters() if ".position_bias." in n or ".toeplitz." in n]
    assert shared == ["encoder.position_bias.weight", "encoder.toeplitz.weight"]
    assert [k for k in model.state_dict() if ".position_bias." in k or ".toeplitz." in k] == shared


def test_urpe_with_c_at_one_equals_rpe_and_both_give_logits_for_every_position():
    rpe, task = build("relative_encoder_rpe_tiny")
    urpe, _ = build("relative_encoder_urpe_tiny")
    assert rpe.encoder.layers[0].self_attn.toeplitz is None
    sample = tokens(task)
    out_rpe, out_urpe = rpe(**sample["net_input"])[0], urpe(**sample["net_input"])[0]
    assert out_rpe.shape == (3, LENGTH, len(task.target_dictionary))
    torch.testing.assert_close(out_rpe, out_urpe)


def test_ape_reference_has_learned_absolute_positions_and_no_relative_bias():
    model, _ = build("relative_encoder_ape_tiny")
    assert model.encoder.embed_positions is not None
    assert model.encoder.layers[0].self_attn.position_bias is None
    assert model.max_positions() >= LENGTH


def test_nope_reference_is_permutation_equivariant():
    model, task = build("relative_encoder_nope_tiny")
    src = tokens(task)["net_input"]["src_tokens"]
    perm = torch.randperm(LENGTH, generator=torch.Generator().manual_seed(0))
    out = model(src, None)[0]
    torch.testing.assert_close(model(src[:, perm], None)[0], out[:, perm])


def test_rpe_encoder_is_not_permutation_equivariant_once_its_bias_is_not_flat():
    model, task = build("relative_encoder_rpe_tiny")
    torch.nn.init.normal_(model.encoder.layers[0].self_attn.position_bias.weight)
    src = tokens(task)["net_input"]["src_tokens"]
    perm = torch.arange(LENGTH).flip(0).roll(3)
    assert not torch.allclose(model(src[:, perm], None)[0], model(src, None)[0][:, perm], atol=1e-4)


def test_pi_longer_than_the_vocabulary_is_refused_naming_the_options():
    with pytest.raises(ValueError, match="--seq-len"):
        build("relative_encoder_rpe_tiny", "--vocab-size", "5", task="pi")
