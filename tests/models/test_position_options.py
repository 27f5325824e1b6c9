"""Every position option against every kind and ``C``: a value given to a kind that does not read it is
refused naming the option and the kind; out-of-range values are refused naming the option; errors name
only options the user gave."""

import re
from types import SimpleNamespace

import pytest

from fairseq_urpe.models.option_checks import (config_defaults, position_options, refuse_unread_given,
                                              resolve_position_options)
from fairseq_urpe.models.position_builders import build_position_modules
from fairseq_urpe.models.position_kinds import POSITION_KINDS
from fairseq_urpe.models.reweightings import REWEIGHTINGS
from fairseq_urpe.models.relative_transformer_lm import RelativeTransformerLanguageModelConfig

LONGEST = 15  # --tokens-per-sample 16
# Per option: a value out of range (None: the parser's choices leave none) and a valid non-default one.
VALUES = {
    "rpe_slopes": (None, "learned"),
    "rpe_init": (None, "zero"),
    "rpe_num_buckets": (-3, 8),
    "rpe_max_distance": (-5, 64),
    "urpe_max_distance": (-1, 10),
    "urpe_beyond_max": (None, "error"),
}
DEFAULTS = config_defaults(RelativeTransformerLanguageModelConfig)


def build(kind: str, toeplitz: str, on_command_line: bool = True, **given):
    """What the named archs do with the position options the command line gave (``on_command_line``), then
    the language model's ``build_model``, then its modules."""
    cfg = SimpleNamespace(**{**DEFAULTS, "rpe_kind": kind, "urpe_toeplitz": toeplitz, **given})
    if on_command_line:
        refuse_unread_given(cfg, tuple(given))
    resolve_position_options(cfg, DEFAULTS, LONGEST, "--tokens-per-sample - 1")
    return build_position_modules(cfg, num_heads=4, embed_dim=32, bidirectional=False)


def flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def test_the_values_cover_every_option_the_registry_knows():
    assert set(VALUES) == set(position_options())


CASES = [(kind, toeplitz, option) for kind in POSITION_KINDS for toeplitz in REWEIGHTINGS for option in VALUES]


@pytest.mark.parametrize("kind,toeplitz,option", CASES, ids=["-".join(case) for case in CASES])
def test_every_option_given_to_every_kind_and_c(kind, toeplitz, option):
    bad, good = VALUES[option]
    if option in POSITION_KINDS[kind].reads or option in REWEIGHTINGS[toeplitz].reads:
        build(kind, toeplitz, **{option: good})
        if bad is not None:
            with pytest.raises(ValueError, match=re.escape(flag(option))):
                build(kind, toeplitz, **{option: bad})
        return
    for value in (good, bad) if bad is not None else (good,):
        with pytest.raises(ValueError) as refused:
            build(kind, toeplitz, **{option: value})
        message = str(refused.value)
        assert message.startswith(f"{flag(option)} applies to "), message
        assert f"--rpe-kind {kind}" in message or f"--urpe-toeplitz {toeplitz}" in message, message
        assert message.endswith(f"(got {flag(option)} {value})"), message


def test_an_option_left_at_its_default_is_accepted_by_every_kind():
    for kind in POSITION_KINDS:
        for toeplitz in REWEIGHTINGS:
            build(kind, toeplitz, on_command_line=False, **{option: DEFAULTS[option] for option in VALUES})


@pytest.mark.parametrize("arch,flags,message", [
    ("transformer_lm_alibi_tiny", ["--rpe-num-buckets", "32"], "(got --rpe-num-buckets 32)"),
    ("transformer_lm_rpe_tiny", ["--urpe-beyond-max", "clamp"], "--urpe-beyond-max applies to --urpe-toeplitz unique"),
    ("transformer_lm_log_tiny", ["--rpe-init", "alibi"], "--rpe-kind log has no learned bias to start"),
    ("relative_transformer_lm", ["--rpe-kind", "alibi", "--urpe-toeplitz", "none", "--rpe-max-distance", "128"],
     "--rpe-kind alibi with"),
])
def test_an_option_given_at_its_default_value_to_a_kind_that_ignores_it_is_refused(build_lm, arch, flags, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_lm(arch, *flags)


@pytest.mark.parametrize(
    "arch,flags,message",
    [
        ("transformer_lm_alibi_tiny", ["--rpe-num-buckets", "-3"],
         "--rpe-num-buckets applies to --rpe-kind t5, and to --urpe-toeplitz bucketed; --rpe-kind alibi with "
         "--urpe-toeplitz none has no buckets (got --rpe-num-buckets -3)"),
        ("transformer_lm_alibi_tiny", ["--rpe-max-distance", "-5"], "--rpe-kind alibi with --urpe-toeplitz none"),
        ("transformer_lm_rope_tiny", ["--rpe-max-distance", "-5"], "--rpe-kind rope with --urpe-toeplitz none"),
        ("transformer_lm_log_tiny", ["--rpe-init", "zero"], "--rpe-init applies to --rpe-kind t5 or learned; "
         "--rpe-kind log has no learned bias to start (got --rpe-init zero)"),
        ("transformer_lm_nope_tiny", ["--rpe-init", "zero"], "--rpe-kind none has no learned bias to start"),
        ("transformer_lm_rpe_tiny", ["--urpe-max-distance", "-1"],
         "--urpe-max-distance applies to --urpe-toeplitz unique; --urpe-toeplitz none has no per-distance C"),
        ("transformer_lm_rpe_tiny", ["--urpe-beyond-max", "error"], "--urpe-beyond-max applies to --urpe-toeplitz unique"),
    ],
)
def test_fairseqs_parser_and_build_refuse_an_option_the_arch_does_not_read(build_lm, arch, flags, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_lm(arch, *flags)


def test_an_error_names_the_option_given_and_not_the_ones_left_at_their_defaults(build_lm):
    with pytest.raises(ValueError) as refused:
        build_lm("transformer_lm_urpe_learned_tiny", "--rpe-max-distance", "16")
    message = str(refused.value)
    assert "--rpe-max-distance must be greater than 16" in message and "--rpe-num-buckets" not in message, message
    assert message.startswith("URPE's bucketed C"), message  # the learned bias takes 16; its bucketed C does not


def test_a_unique_c_on_one_token_names_the_length_option_not_one_never_given(build_lm):
    with pytest.raises(ValueError) as refused:
        build_lm("transformer_lm_urpe_tiny", "--urpe-toeplitz", "unique", tokens_per_sample=1)
    message = str(refused.value)
    assert "--tokens-per-sample - 1 = 0" in message and "--urpe-max-distance" not in message, message
