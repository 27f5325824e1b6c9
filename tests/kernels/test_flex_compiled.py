"""The compiled ``flex`` path's forward equals the dense path's, for every registered kind read by distance
(CPU, float32), and a fairseq language model evaluates through it as through the dense path.

Compiled flex runs forward-only on CPU, and without the log-sum-exp, so URPE's C is refused there (its
forms are held to dense URPE in test_flex_attention.py). Each compiled shape costs CPU-seconds: one
length, one batch, and the kinds share compiles where their tables have one shape.
"""

import logging

import pytest
import torch

from fairseq_urpe.kernels import dispatch
from fairseq_urpe.modules import RelativeMultiheadAttention
from tests.attention_builders import EMBED, HEADS, make_family_attention, make_rotary_attention, table_cases
from tests.reference import causal_mask

LENGTH, BATCH = 20, 2


def attentions():
    """Every kind acting on the scores by distance (flex refuses a bias of (i, j): test_fire_bias.py), RoPE, and
    no position term: ``{name: attention (float32, eval)}``."""
    built = {str(case): make_family_attention(case, "rpe", True) for case in table_cases()}
    built["rope"] = make_rotary_attention(False)
    torch.manual_seed(0)
    built["nope"] = RelativeMultiheadAttention(EMBED, HEADS).double()
    return {name: attn.float().eval() for name, attn in built.items()}


@pytest.mark.slow
def test_compiled_flex_forward_equals_the_dense_path_for_every_kind(caplog, monkeypatch):
    monkeypatch.setattr(dispatch, "_LOGGED", set())  # each line is logged once a process
    torch._dynamo.reset()
    dispatch._FLEX.clear()
    torch.manual_seed(1)
    x = torch.randn(LENGTH, BATCH, EMBED)
    mask = causal_mask(LENGTH, torch.float32)
    flex_log = []
    for name, attn in attentions().items():
        with torch.no_grad():
            attn.attention_impl = "dense"
            want, _ = attn(x, attn_mask=mask, need_weights=False)
            attn.attention_impl = "flex"
            caplog.clear()
            with caplog.at_level(logging.INFO, logger=dispatch.logger.name):
                got, _ = attn(x, attn_mask=mask, need_weights=False)
            flex_log.append(caplog.text)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")
    flex_log = "".join(flex_log)
    assert "attention path: flex (--urpe-attention-impl flex; bias tables)" in flex_log
    assert "attention path: flex (--urpe-attention-impl flex; none tables)" in flex_log
    assert "attention path: dense" not in flex_log and "recompile limit" not in flex_log


from tests.models.conftest import build_lm, dict_dir  # noqa: E402,F401  (fixtures)


@pytest.mark.slow
def test_a_language_model_evaluates_through_compiled_flex_as_through_the_dense_path(build_lm, caplog,  # noqa: F811
                                                                                    monkeypatch):
    monkeypatch.setattr(dispatch, "_LOGGED", set())
    flags = ("--urpe-toeplitz", "none", "--attention-dropout", "0")
    flex, _ = build_lm("transformer_lm_urpe_tiny", *flags, "--urpe-attention-impl", "flex")
    dense, _ = build_lm("transformer_lm_urpe_tiny", *flags, "--urpe-attention-impl", "dense")
    dense.load_state_dict(flex.state_dict())
    tokens = torch.randint(4, 40, (2, 13))
    with torch.no_grad():
        want = dense.eval()(tokens)[0]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=dispatch.logger.name):
            got = flex.eval()(tokens)[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert "attention path: flex (--urpe-attention-impl flex; bias tables)" in caplog.text
    assert "attention path: dense" not in caplog.text
