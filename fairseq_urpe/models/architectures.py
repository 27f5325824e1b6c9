"""Named architectures of ``relative_transformer_lm``: ``transformer_lm_<variant><size>``.

Each kind of the registry (:mod:`.position_kinds`) gives an RPE variant (its ``arch`` name part; T5's is
``rpe``) and a URPE one (``urpe_<part>``; T5's is plain ``urpe``), each also dot-product-free
(``<variant>_dpf``: scores from the bias alone) where the kind allows it, and each variant comes in every
size of :data:`SIZES`. The variants preset the position options; explicit flags still win. The list, as
registered: docs/architectures.md, written by :mod:`.arch_table`.
"""

from fairseq.models import ARCH_CONFIG_REGISTRY, register_model_architecture
from fairseq.models.transformer_lm import base_lm_architecture, transformer_lm_baevski_wiki103, transformer_lm_gpt2_small
from fairseq.utils import safe_getattr

from .option_checks import command_line_check, config_defaults, given_on_command_line, refuse_unread_given
from .position_kinds import POSITION_KINDS
from .relative_transformer_lm import RelativeTransformerLanguageModel, RelativeTransformerLanguageModelConfig

URPE = {"urpe_toeplitz": "bucketed"}
RPE = {"urpe_toeplitz": "none"}


def tiny_sizes(args):
    """A model small enough for tests and the CPU demo: 2 layers, width 64, 4 heads."""
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 64)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 256)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 4)


SIZES = {
    "": base_lm_architecture,
    "_tiny": tiny_sizes,
    "_wiki103": transformer_lm_baevski_wiki103,  # adaptive input/softmax, 16 layers, width 1024
    "_gpt2_small": transformer_lm_gpt2_small,  # 24 layers, width 1024, 16 heads, GELU
}


def variants():
    """``{variant name: position options}`` for every registered variant."""
    table = {}
    for kind_name, kind in POSITION_KINDS.items():
        for part, defaults in kind.arch_parts(kind_name).items():
            options = {"rpe_kind": kind_name, **defaults}
            urpe_name = "urpe" if part == "rpe" else f"urpe_{part}"
            table[part] = {**options, **RPE}
            table[urpe_name] = {**options, **URPE}
            if kind.dot_product_free:
                table[f"{part}_dpf"] = {**options, **RPE, "dot_product_free": True}
                table[f"{urpe_name}_dpf"] = {**options, **URPE, "dot_product_free": True}
    return table


def baseline_variants():
    """The variants a comparison against stock runs by default: each kind's RPE and URPE pair, without
    ``ape`` (stock fairseq is the absolute-position baseline) and without ``_dpf``."""
    return [name for name, options in variants().items()
            if not options.get("dot_product_free") and not options.get("absolute_positions")]


def preset(options, sizes):
    """An arch function: ``sizes``, then the position ``options`` where the user gave none, then fairseq's
    defaults; a position option the command line gave that the kind does not read is refused, at any value."""

    def architecture(args):
        given = given_on_command_line(args)
        sizes(args)
        for name, value in options.items():
            setattr(args, name, safe_getattr(args, name, value))
        base_lm_architecture(args)
        refuse_unread_given(args, given)

    return architecture


ARCHITECTURES = {}
# fairseq registers each model's own name as an arch that does nothing; ours checks what the command line gave.
ARCH_CONFIG_REGISTRY["relative_transformer_lm"] = command_line_check(config_defaults(RelativeTransformerLanguageModelConfig))
for _variant, _options in variants().items():
    for _size, _sizes in SIZES.items():
        _name = f"transformer_lm_{_variant}{_size}"
        ARCHITECTURES[_name] = register_model_architecture("relative_transformer_lm", _name)(preset(_options, _sizes))
