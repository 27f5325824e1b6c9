"""Checks shared by the model tests: random position parameters, incremental decoding, long inputs."""

import torch


def randomise_positions(model):
    """Move b and c away from their initial 0 and 1 so that position handling is really exercised."""
    torch.manual_seed(1)
    for name, p in model.named_parameters():
        if "position_bias" in name:
            torch.nn.init.normal_(p, std=1.0)
        elif "toeplitz" in name:
            torch.nn.init.uniform_(p, 0.0, 2.0)
    return model


def assert_incremental_decoding_equals_full_forward(model, new_order, length=14, split=5):
    """Decode ``length`` tokens one at a time, reordering the beam (``new_order``) after ``split``
    steps, and compare every step with the full forward over the reordered batch (float64 model)."""
    torch.manual_seed(2)
    tokens = torch.randint(4, 40, (len(new_order), length))
    tokens[:, 0] = 2  # </s> starts an LM sequence in fairseq
    new_order = torch.tensor(new_order)
    reordered = torch.cat([tokens[new_order, :split], tokens[:, split:]], dim=1)
    with torch.no_grad():
        full = model(reordered)[0]  # (B, T, V)
        state, steps = {}, []
        for t in range(length):
            if t == split:
                model.decoder.reorder_incremental_state_scripting(state, new_order)
            prefix = tokens[:, : t + 1] if t < split else reordered[:, : t + 1]
            steps.append(model.decoder(prefix, incremental_state=state)[0])
    steps = torch.cat(steps, dim=1)
    torch.testing.assert_close(steps[:, split:], full[:, split:], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(steps[new_order, :split], full[:, :split], rtol=1e-10, atol=1e-10)


def assert_finite_normalised_distributions(model, length):
    """Two random inputs of ``length`` tokens give finite log-probabilities that sum to one."""
    tokens = torch.randint(4, 40, (2, length))
    with torch.no_grad():
        lprobs = model.get_normalized_probs(model(tokens), log_probs=True)
    assert torch.isfinite(lprobs).all()
    torch.testing.assert_close(lprobs.exp().sum(-1), torch.ones(2, length))
