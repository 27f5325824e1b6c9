"""Building the position modules from the configuration and the declarations (``position_kinds``,
``reweightings``): every constructor argument passed by keyword. Errors name the command-line option;
the modules' own errors are led by the component they build (``--rpe-kind t5``, URPE's ``C``)."""

from typing import Callable, Dict, Optional

from torch import nn

from ..modules import PositionModules
from .kind_record import ROTARY, AttentionShape, ModuleRecipe
from .option_checks import check_table_sizes, given, reweighting
from .position_kinds import position_kind
from .position_options import POSITION_OPTIONS


def option_names(cfg, recipe: ModuleRecipe) -> Dict[str, Optional[str]]:
    """What the errors of ``recipe``'s module call its keywords: the flags of the options it reads, or
    ``None`` for one at its default (an error then gives the value, not an option the user never gave)."""
    return {POSITION_OPTIONS[o].keyword: POSITION_OPTIONS[o].flag if given(cfg, o) else None for o in recipe.reads}


def build_module(recipe: ModuleRecipe, shape: AttentionShape, cfg) -> Optional[nn.Module]:
    """``recipe``'s module for attention of ``shape``, its options read from ``cfg`` (``None``: no module)."""
    if recipe.module is None:
        return None
    arguments = {name: getattr(shape, name) for name in recipe.shape}
    for option in recipe.reads:
        value = getattr(cfg, option, None)
        if option in recipe.defaults and not value:
            value = recipe.defaults[option]
        arguments[POSITION_OPTIONS[option].keyword] = POSITION_OPTIONS[option].argument(value)
    if recipe.error_names:
        arguments["names"] = option_names(cfg, recipe)
    return recipe.module(**arguments, **recipe.keywords)


def build_reweighting(c: ModuleRecipe, shape: AttentionShape, cfg) -> Optional[nn.Module]:
    """URPE's ``c`` of ``cfg``'s ``--urpe-toeplitz`` declaration ``c`` (``None`` for 'none', i.e. RPE)."""
    if c.module is not None and "urpe_max_distance" in c.reads and getattr(cfg, "urpe_max_distance", None) is None:
        raise ValueError(f"--urpe-toeplitz {cfg.urpe_toeplitz} needs --urpe-max-distance (or --tokens-per-sample)")
    return build_module(c, shape, cfg)


def built(component: str, make: Callable[[], Optional[nn.Module]]) -> Optional[nn.Module]:
    """``make()``, its ``ValueError`` led by the ``component`` it builds (``--rpe-kind t5``, URPE's ``C``)."""
    try:
        return make()
    except ValueError as error:
        raise ValueError(f"{component}: {error}") from error


def build_position_modules(cfg, num_heads: int, embed_dim: int, bidirectional: bool) -> PositionModules:
    """``--rpe-kind``'s module (in the slot of its contract) and URPE's ``c`` for attention of ``num_heads``
    heads over ``embed_dim``; raises ``ValueError`` naming the option on impossible combinations, and on
    tables too large (:func:`~.option_checks.check_table_sizes`) before allocating anything."""
    name, kind, c = str(cfg.rpe_kind), position_kind(cfg), reweighting(cfg)
    check_table_sizes(cfg, num_heads, bidirectional)
    if cfg.dot_product_free and not kind.dot_product_free:
        raise ValueError(f"--rpe-kind {name} acts on q and k, which --dot-product-free removes; "
                         f"choose another --rpe-kind or drop --dot-product-free")
    shape = AttentionShape(num_heads, embed_dim // num_heads, bidirectional)
    if kind.contract is ROTARY and shape.head_dim % 2:
        raise ValueError(f"--rpe-kind {name} pairs the head's dimensions: the head dim (embed dim / heads) must be "
                         f"even, got {shape.head_dim}")
    module = built(f"--rpe-kind {name}", lambda: build_module(kind, shape, cfg))
    layout = str(cfg.urpe_toeplitz)
    reweight = built(f"URPE's {layout} C (--urpe-toeplitz {layout})", lambda: build_reweighting(c, shape, cfg))
    return PositionModules(**{kind.contract.slot: module, c.contract.slot: reweight})
