"""The table of every named architecture, written from the registry: ``docs/architectures.md``.

    python -m fairseq_urpe.models.arch_table > docs/architectures.md

The position kinds (``position_kinds.POSITION_KINDS``), URPE's ``C`` (``reweightings.REWEIGHTINGS``), the
variants and sizes of the language model's archs (``architectures``) and the encoder's archs
(``relative_encoder``), as they are declared and registered; a test regenerates the file and compares.
Docs link to it instead of listing kinds or archs.
"""

import argparse
import sys
from typing import List

from .architectures import ARCHITECTURES, SIZES, preset, variants
from .kind_record import AttentionShape
from .position_builders import build_module
from .position_kinds import POSITION_KINDS
from .position_options import flag
from .relative_position_config import RelativePositionConfig
from .reweightings import REWEIGHTINGS
from .relative_encoder import ENCODER_ARCHITECTURES, ENCODER_SIZES, ENCODER_VARIANTS

HEADS, HEAD_DIM = 8, 64  # the base size's, for the parameter counts


def cell(text: str) -> str:
    """``text`` as one cell of a markdown table."""
    return text.replace("|", "\\|")


def position_parameters(name: str) -> int:
    """Learned parameters of kind ``name``'s module at :data:`HEADS` heads, with its default options."""
    module = build_module(POSITION_KINDS[name], AttentionShape(HEADS, HEAD_DIM, False), RelativePositionConfig())
    return sum(p.numel() for p in module.parameters()) if module is not None else 0


def kinds_table() -> List[str]:
    rows = ["| `--rpe-kind` | acts on | what it is | options it reads | fused kernel | parameters at 8 heads |",
            "|---|---|---|---|---|---:|"]
    for name, kind in POSITION_KINDS.items():
        reads = ", ".join(f"`{flag(o)}`" for o in kind.reads) or "none"
        rows.append(f"| `{name}` | {kind.contract.acts_on if kind.module else 'nothing'} | {cell(kind.description)} | "
                    f"{reads} | {'yes' if kind.fused_kernel else 'no'} | {position_parameters(name):,} |")
    return rows


def reweighting_table() -> List[str]:
    rows = ["| `--urpe-toeplitz` | options its `C` reads |", "|---|---|"]
    for value, c in REWEIGHTINGS.items():
        rows.append(f"| `{value}` | " + (", ".join(f"`{flag(o)}`" for o in c.reads) or "none (no `C`: RPE)") + " |")
    return rows


def variants_table() -> List[str]:
    rows = ["| variant | `--rpe-kind` | URPE's `C` (`--urpe-toeplitz`) | `Q K^T` | other presets |", "|---|---|---|---|---|"]
    for variant, options in variants().items():
        other = ", ".join(f"`{flag(k)}`" for k, v in options.items()
                          if k not in ("rpe_kind", "urpe_toeplitz", "dot_product_free") and v is True)
        dot_product = "no (`--dot-product-free`)" if options.get("dot_product_free") else "yes"
        rows.append(f"| `{variant}` | `{options['rpe_kind']}` | {options['urpe_toeplitz']} | {dot_product} | {other} |")
    return rows


def sizes_table() -> List[str]:
    rows = ["| size suffix | layers | width | heads | FFN | adaptive input and softmax | activation |",
            "|---|---:|---:|---:|---:|---|---|"]
    for suffix, sizes in SIZES.items():
        args = argparse.Namespace()
        preset({}, sizes)(args)
        rows.append(f"| {f'`{suffix}`' if suffix else '(none)'} | {args.decoder_layers} | {args.decoder_embed_dim} | "
                    f"{args.decoder_attention_heads} | {args.decoder_ffn_embed_dim} | "
                    f"{'yes' if getattr(args, 'adaptive_input', False) else 'no'} | {args.activation_fn} |")
    return rows


def encoder_tables() -> List[str]:
    rows = ["| variant | position options |", "|---|---|"]
    for variant, options in ENCODER_VARIANTS.items():
        rows.append(f"| `{variant}` | " + ", ".join(f"`{flag(k)} {v}`" if v is not True else f"`{flag(k)}`"
                                                   for k, v in options.items()) + " |")
    rows += ["", "| size | layers | width | heads | FFN |", "|---|---:|---:|---:|---:|"]
    for size, (layers, width, heads, ffn, _) in ENCODER_SIZES.items():
        rows.append(f"| `_{size}` | {layers} | {width} | {heads} | {ffn} |")
    return rows


def render() -> str:
    lines = [
        "# Architectures",
        "",
        "<!-- Written by `python -m fairseq_urpe.models.arch_table > docs/architectures.md` from the declarations",
        "     (fairseq_urpe/models/position_kinds.py, reweightings.py); a test regenerates it and compares. -->",
        "",
        f"The language model `relative_transformer_lm` has {len(ARCHITECTURES)} named archs, "
        f"`transformer_lm_<variant><size>`: each of the {len(variants())} variants with each of the "
        f"{len(SIZES)} sizes (e.g. `transformer_lm_urpe_tiny`). "
        "A variant presets the position options; flags on the command line override them.",
        "",
        "## Position kinds",
        "",
        *kinds_table(),
        "",
        "A model reads the options of its kind and of its `C`; a value given to any other position option "
        "stops the build with an error that names the option and the kind.",
        "",
        *reweighting_table(),
        "",
        "## Variants",
        "",
        *variants_table(),
        "",
        "## Sizes",
        "",
        *sizes_table(),
        "",
        "## The encoder",
        "",
        f"`relative_encoder` (bidirectional, for the synthetic tasks) has {len(ENCODER_ARCHITECTURES)} archs, "
        "`relative_encoder_<variant>_<size>`:",
        "",
        *encoder_tables(),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
