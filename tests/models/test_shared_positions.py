"""Shared b and c: built once, owned by the decoder (outside the layers), evaluated once per forward,
and stored once, under the decoder (checkpoints of the per-layer layout: test_checkpoint_upgrade.py)."""

import pytest
import torch

from tests.models.checks import randomise_positions


def count_table_calls(monkeypatch, module):
    calls = []
    original = type(module).by_distance
    monkeypatch.setattr(type(module), "by_distance", lambda self, d: calls.append(1) or original(self, d))
    return calls


def test_shared_modules_belong_to_the_decoder_not_to_the_layers(build_lm):
    model, _ = build_lm("transformer_lm_urpe_tiny", "--decoder-layers", "3")
    decoder = model.decoder
    shared = {id(p) for p in decoder.position_bias.parameters()} | {id(p) for p in decoder.toeplitz.parameters()}
    assert len(shared) == 2
    for layer in decoder.layers:  # what --ddp-backend fully_sharded wraps, one unit per layer
        assert not shared & {id(p) for p in layer.parameters()}
        assert layer.self_attn.position_bias is decoder.position_bias
    names = [n for n, p in model.named_parameters() if id(p) in shared]
    assert names == ["decoder.position_bias.weight", "decoder.toeplitz.weight"]


def test_checkpoint_stores_shared_modules_once_under_the_decoder_and_loads_back(build_lm):
    model, _ = build_lm("transformer_lm_urpe_tiny", "--decoder-layers", "3")
    state = randomise_positions(model).state_dict()
    assert torch.equal(state["decoder.position_bias.weight"], model.decoder.position_bias.weight)
    assert [k for k in state if ".position_bias." in k or ".toeplitz." in k] == [
        "decoder.position_bias.weight", "decoder.toeplitz.weight"]
    fresh, _ = build_lm("transformer_lm_urpe_tiny", "--decoder-layers", "3")
    fresh.load_state_dict(state)
    assert torch.equal(fresh.decoder.toeplitz.weight, model.decoder.toeplitz.weight)


def test_a_per_layer_checkpoint_is_refused_by_a_shared_model_naming_the_option(build_lm):
    per_layer, _ = build_lm("transformer_lm_urpe_tiny", "--rpe-per-layer")
    shared, _ = build_lm("transformer_lm_urpe_tiny")
    state = randomise_positions(per_layer).state_dict()
    with pytest.raises(ValueError, match="--rpe-per-layer: the checkpoint's True, this model's False"):
        shared.load_state_dict(state)
    del state["decoder.position_settings"]  # a checkpoint without the record: its copies differ, named too
    with pytest.raises(ValueError, match="different decoder.layers.<i>.self_attn.position_bias.weight .* --rpe-per-layer"):
        shared.load_state_dict(state)


@pytest.mark.parametrize("flags,per_forward", [((), 1), (("--rpe-per-layer",), 3)])
def test_tables_are_made_once_per_forward_and_once_for_the_decoding_steps(build_lm, monkeypatch, flags, per_forward):
    model, _ = build_lm("transformer_lm_rpe_tiny", "--decoder-layers", "3", *flags)
    calls = count_table_calls(monkeypatch, model.decoder.layers[0].self_attn.position_bias)
    tokens = torch.randint(4, 40, (2, 6))
    model(tokens)
    assert len(calls) == per_forward
    calls.clear()
    state = {}
    with torch.no_grad():
        for t in range(4):
            model.decoder(tokens[:, : t + 1], incremental_state=state)
    assert len(calls) == per_forward  # the 4 steps slice tables made once for the modules' values (decoding_rows)


def test_activation_checkpointing_and_two_forwards_in_flight_give_the_plain_gradients(build_lm):
    plain, _ = build_lm("transformer_lm_urpe_tiny", "--dropout", "0")
    checkpointed, _ = build_lm("transformer_lm_urpe_tiny", "--dropout", "0", "--checkpoint-activations")
    plain = randomise_positions(plain).double()
    checkpointed = checkpointed.double()
    checkpointed.load_state_dict(plain.state_dict())
    batches = [torch.randint(4, 40, (2, 9)) for _ in range(2)]
    for model in (plain, checkpointed):
        losses = [model(tokens)[0].logsumexp(-1).sum() for tokens in batches]  # both forwards, then both backwards
        for loss in losses:
            loss.backward()
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-10, atol=1e-12, msg=name)
    one = [p.grad.clone() for p in plain.parameters()]
    plain.zero_grad()
    for tokens in batches:  # the same two batches one after the other
        plain(tokens)[0].logsumexp(-1).sum().backward()
    for (name, p), g in zip(plain.named_parameters(), one):
        torch.testing.assert_close(p.grad, g, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("ema_fp32", [False, True])
def test_fairseq_ema_decays_the_shared_tables_once_per_step(build_lm, ema_fp32):
    """fairseq's ``--store-ema`` updates every state-dict entry in place: each shared table is one entry
    (stored once, under the decoder), so it is decayed once per step."""
    from fairseq.dataclass.configs import EMAConfig
    from fairseq.models.ema import EMA

    model, _ = build_lm("transformer_lm_urpe_tiny", "--decoder-layers", "3")
    ema = EMA(model, EMAConfig(store_ema=True, ema_decay=0.5, ema_fp32=ema_fp32))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    randomise_positions(model)
    with torch.no_grad():
        model.decoder.layers[1].fc1.weight.add_(1.0)
    after = model.state_dict()
    assert sum(".toeplitz." in k for k in after) == 1
    ema.step(model)
    averaged = ema.get_model()
    for name in ("decoder.position_bias.weight", "decoder.toeplitz.weight", "decoder.layers.1.fc1.weight"):
        expected = 0.5 * before[name].double() + 0.5 * after[name].double()
        got = dict(averaged.named_parameters())[name].double()
        assert not torch.equal(before[name], after[name])
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6, msg=name)
