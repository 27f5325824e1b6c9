"""Luo et al.'s impossibility argument (NeurIPS 2022, section 3), checked on the real models in float64.

Softmax attention gives a right-stochastic ``A`` (every row sums to one) whatever the bias ``b``. On a
constant input (every token the same, no absolute positions) every layer sees the same vector at every
position, so every value ``v_j`` is the same ``v`` and ``sum_j A_ij v_j = v``: an RPE model's output is
identical at every position, however deep, and cannot tell positions apart (on such inputs PI is at
most 1/n right). URPE multiplies ``A`` by the Toeplitz ``C``; row ``i`` of ``A ⊙ C`` sums to
``sum_j A_ij c(i - j)``, which changes with ``i`` near the ends of the sequence once ``c`` is not constant,
so URPE's output can depend on the position. The same holds for the causal LM, whose rows are
stochastic over the visible keys. docs/expressiveness/urpe_position_tasks.md cites this as the mechanism
behind the ETP/PI gap.
"""

import pytest
import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from tests.models.conftest import USER_DIR

LENGTH = 12


def build_encoder(arch):
    parser = options.get_training_parser()
    argv = ["--task", "position_synthetic", "--vocab-size", "20", "--seq-len", str(LENGTH), "--arch", arch,
            "--criterion", "token_accuracy", "--user-dir", USER_DIR, "--cpu"]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
    torch.manual_seed(0)
    return tasks.setup_task(cfg.task).build_model(cfg.model)


def randomise(model, c_spread):
    """``b ~ N(0, 1)``; ``c ~ U(1 - c_spread, 1 + c_spread)`` (0: C stays all ones). Float64, eval."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "position_bias" in name:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype))
            elif "toeplitz" in name:
                p.copy_(1 + c_spread * (2 * torch.rand(p.shape, generator=generator, dtype=p.dtype) - 1))
    return model.double().eval()


def constant_inputs(length, first_token=5):
    """Two sequences, each one token repeated: ``(2, length)``."""
    return torch.tensor([[first_token] * length, [first_token + 3] * length])


def spread_over_positions(out):
    """Largest difference between any position's output and position 0's: ``out`` (B, T, ...)."""
    return (out - out[:, :1]).abs().max().item()


@pytest.mark.parametrize("arch, c_spread", [("relative_encoder_rpe_tiny", 0.0), ("relative_encoder_urpe_tiny", 0.0)],
                         ids=["rpe", "urpe_with_c_at_one"])
def test_rpe_encoder_output_is_identical_at_every_position_of_a_constant_input(arch, c_spread):
    model = randomise(build_encoder(arch), c_spread)
    with torch.no_grad():
        logits, extra = model(constant_inputs(LENGTH))
    features = extra["encoder_out"][0]  # (T, B, E)
    assert spread_over_positions(logits) < 1e-12 and spread_over_positions(features.transpose(0, 1)) < 1e-12
    assert (logits[0, 0] - logits[1, 0]).abs().max() > 1e-3  # it does see the token


def test_urpe_encoder_with_non_constant_c_gives_different_outputs_along_a_constant_input():
    model = randomise(build_encoder("relative_encoder_urpe_tiny"), c_spread=0.5)
    with torch.no_grad():
        features = model(constant_inputs(LENGTH))[1]["encoder_out"][0].transpose(0, 1)  # (B, T, E)
    # At BERT's initialisation (weights N(0, 0.02)) the attention adds little to the residual stream, so the
    # differences are small (about 1e-3), yet nine orders of magnitude above RPE's float64 bound of 1e-12.
    steps = (features[:, 1:] - features[:, :-1]).abs().amax(dim=(0, 2))  # (T - 1,)
    assert steps.min() > 1e-5, steps  # every position differs from the previous one
    assert (features[:, 0] - features[:, -1]).abs().max() > 1e-4  # not mirror images: c is not symmetric


@pytest.mark.parametrize("arch", ["transformer_lm_rpe_tiny", "transformer_lm_alibi_tiny", "transformer_lm_log_dpf_tiny"])
def test_causal_rpe_lm_output_is_identical_at_every_position_of_a_constant_input(build_lm, arch):
    model, _ = build_lm(arch)
    model = randomise(model, c_spread=0.0)
    with torch.no_grad():
        assert spread_over_positions(model(constant_inputs(LENGTH))[0]) < 1e-12


def test_causal_urpe_lm_with_non_constant_c_tells_positions_of_a_constant_input_apart(build_lm):
    model, _ = build_lm("transformer_lm_urpe_tiny")
    model = randomise(model, c_spread=0.5)
    with torch.no_grad():
        logits = model(constant_inputs(LENGTH))[0]  # (B, T, V)
    assert (logits[:, 1:] - logits[:, :-1]).abs().amax(dim=(0, 2)).min() > 1e-3  # every step changes the output
