"""A checkpoint loads only as the model it is: its position settings travel with its weights and an
override that changes one is refused naming it and both values; one that does not change the function
loads. A position table holding NaN or inf is named at load. Bad sizes are named before any allocation."""

import math
import re

import pytest
import torch
from fairseq import checkpoint_utils
from omegaconf import OmegaConf

from fairseq_urpe.models.position_record import decode


def save(model, cfg, path, state=None):
    """``model`` (or its ``state`` dict) as fairseq-train writes it: its weights and config."""
    torch.save({"cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
                "model": model.state_dict() if state is None else state,
                "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam",
                                       "lr_scheduler_state": {}, "num_updates": 1}],
                "extra_state": {}}, path)
    return path


def load(path, dict_dir, **overrides):
    models, cfg = checkpoint_utils.load_model_ensemble([str(path)], arg_overrides={"data": dict_dir, **overrides})
    return models[0], cfg


@pytest.mark.parametrize("arch,flags,override,names", [
    ("transformer_lm_kerple_tiny", [], {"rpe_kind": "kerple_power"}, ["--rpe-kind: the checkpoint's kerple, this model's kerple_power"]),
    ("transformer_lm_alibi_tiny", [], {"rpe_kind": "rope"}, ["--rpe-kind: the checkpoint's alibi, this model's rope"]),
    ("transformer_lm_alibi_tiny", [], {"rpe_kind": "none"}, ["--rpe-kind: the checkpoint's alibi, this model's none"]),
    ("transformer_lm_rpe_tiny", [], {"rpe_kind": "learned", "rpe_max_distance": 31},
     ["--rpe-kind: the checkpoint's t5, this model's learned", "--rpe-max-distance: the checkpoint's 128, this model's 31"]),
    ("transformer_lm_urpe_alibi_tiny", [], {"urpe_toeplitz": "unique", "urpe_max_distance": 31},
     ["--urpe-toeplitz: the checkpoint's bucketed, this model's unique"]),
    ("transformer_lm_alibi_tiny", [], {"rpe_slopes": "learned"}, ["--rpe-slopes: the checkpoint's fixed, this model's learned"]),
    ("transformer_lm_rpe_tiny", [], {"rpe_num_buckets": 16}, ["--rpe-num-buckets: the checkpoint's 32, this model's 16"]),
])
def test_an_override_that_changes_the_position_function_is_refused_naming_it(build_lm, dict_dir, tmp_path, arch, flags,
                                                                             override, names):
    model, cfg = build_lm(arch, *flags)
    path = save(model, cfg, tmp_path / "checkpoint.pt")
    with pytest.raises(ValueError) as refused:
        load(path, dict_dir, **override)
    for name in names:
        assert name in str(refused.value), str(refused.value)


@pytest.mark.parametrize("arch,flags,override", [
    ("transformer_lm_urpe_tiny", [], {"tokens_per_sample": 64}),  # eval at another length: bucketed C
    ("transformer_lm_urpe_tiny", ["--urpe-toeplitz", "unique"], {"tokens_per_sample": 64}),
    ("transformer_lm_urpe_tiny", ["--urpe-toeplitz", "unique", "--urpe-beyond-max", "error"], {"urpe_beyond_max": "clamp"}),
    ("transformer_lm_urpe_learned_tiny", [], {"rpe_init": "zero", "urpe_attention_impl": "dense"}),
])
def test_an_override_that_keeps_the_function_loads_the_same_weights(build_lm, dict_dir, tmp_path, arch, flags, override):
    model, cfg = build_lm(arch, *flags)
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
    path = save(model, cfg, tmp_path / "checkpoint.pt")
    loaded, _ = load(path, dict_dir, **override)
    tokens = torch.randint(4, 40, (2, 10))
    torch.testing.assert_close(loaded.eval()(tokens)[0], model.eval()(tokens)[0], rtol=0, atol=0)


def test_the_record_names_the_settings_that_define_the_function(build_lm):
    model, _ = build_lm("transformer_lm_urpe_tiny", "--urpe-toeplitz", "unique")
    assert decode(model.decoder.position_settings) == {
        "rpe_kind": "t5", "urpe_toeplitz": "unique", "rpe_num_buckets": 32, "rpe_max_distance": 128,
        "urpe_max_distance": 15, "rpe_per_layer": False, "dot_product_free": False, "absolute_positions": False}
    assert decode(model.half().decoder.position_settings) == decode(model.bfloat16().decoder.position_settings)


@pytest.mark.parametrize("arch,key,head,value", [
    ("transformer_lm_rpe_tiny", "decoder.position_bias.weight", 2, math.nan),
    ("transformer_lm_urpe_tiny", "decoder.toeplitz.weight", 1, math.inf),
    ("transformer_lm_kerple_tiny", None, 3, math.nan),  # KERPLE's r1 (whatever it is stored as)
    ("transformer_lm_log_tiny", None, 0, -math.inf),  # log's slopes
    ("transformer_lm_urpe_tiny", "decoder.layers.1.self_attn.toeplitz.weight", 0, math.nan),  # --rpe-per-layer
])
def test_a_non_finite_position_table_is_named_at_load(build_lm, dict_dir, tmp_path, arch, key, head, value):
    flags = ["--rpe-per-layer"] if key and ".layers." in key else []
    model, cfg = build_lm(arch, *flags)
    state = model.state_dict()
    if key is None:
        key = next(k for k in state if re.search(r"position_bias\.[^.]+$", k) and state[k].is_floating_point())
    state[key][head] = value
    path = save(model, cfg, tmp_path / "checkpoint.pt", state)
    with pytest.raises(ValueError, match=re.escape(f"position table {key} holds NaN or inf at head(s) {head}")):
        load(path, dict_dir)


@pytest.mark.parametrize("arch,flags,message", [
    ("transformer_lm_rpe_tiny", ["--rpe-max-distance", str(2**62)], "--rpe-max-distance must be at most 2147483647"),
    ("transformer_lm_learned_tiny", ["--rpe-max-distance", str(10**9)], "--rpe-max-distance 1000000000 makes the per-distance bias"),
    ("transformer_lm_urpe_tiny", ["--urpe-toeplitz", "unique", "--urpe-max-distance", str(10**9)],
     "--urpe-max-distance 1000000000 makes the per-distance C a table of 4 heads x 1000000001 float32 entries"),
    ("transformer_lm_rpe_tiny", ["--rpe-num-buckets", str(10**9), "--rpe-max-distance", str(2 * 10**9)],
     "--rpe-num-buckets 1000000000 makes the bias's buckets"),
    ("transformer_lm_urpe_tiny", ["--attention-dropout", "nan"], "--attention-dropout must be a rate in [0, 1), got nan"),
    ("transformer_lm_rpe_tiny", ["--attention-dropout", "-0.5"], "--attention-dropout must be a rate in [0, 1), got -0.5"),
    ("transformer_lm_alibi_tiny", ["--attention-dropout", "1"], "--attention-dropout must be a rate in [0, 1), got 1"),
    ("transformer_lm_nope_tiny", ["--rpe-per-layer"], "--rpe-per-layer learns b and c in every layer apart, but --rpe-kind none"),
    ("transformer_lm_rope_tiny", ["--rpe-per-layer"], "--rpe-kind rope with --urpe-toeplitz none learns no position table"),
    ("transformer_lm_alibi_tiny", ["--rpe-per-layer"], "--rpe-kind alibi with --urpe-toeplitz none learns no position table"),
])
def test_a_bad_value_is_named_before_anything_is_allocated(build_lm, arch, flags, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_lm(arch, *flags)


def test_per_layer_tables_are_accepted_where_something_is_learned(build_lm):
    model, _ = build_lm("transformer_lm_alibi_tiny", "--rpe-per-layer", "--rpe-slopes", "learned")
    assert model.decoder.layers[1].self_attn.position_bias is not model.decoder.layers[0].self_attn.position_bias
