"""What a checkpoint's position function is, stored with its weights and compared when it loads.

A checkpoint's weights compute the function they were trained as only under the settings they were trained
with: the kind, ``C``'s layout, the tables' sizes and buckets, the slope mode, per-layer tables,
dot-product-free scores. Names and shapes do not tell them apart (a KERPLE log model loads as KERPLE
power, ALiBi's as RoPE's, a 32-bucket T5 table as a per-distance table of 31 entries). So the encoder or
decoder keeps those settings in a buffer, :data:`RECORD` (their JSON's bytes as float32 values, which
fp16, bf16 and fairseq's EMA carry unchanged to the nearest integer), saved in every
checkpoint; loading a checkpoint into a model built with other settings (``--model-overrides``, the hub's
keyword arguments, ``--restore-file`` under other flags) is refused, naming each setting and both values.
Settings that do not change the function (``--tokens-per-sample`` for evaluation, ``--urpe-beyond-max``,
``--rpe-init``, the attention implementation) are not recorded. A checkpoint without the record loads
as it did, checked by its tables' names and shapes only.

The same load names a position table holding NaN or inf (:func:`check_finite_tables`).
"""

import json
import re
from typing import Dict, Mapping

import torch

from .option_checks import reweighting
from .position_kinds import position_kind
from .position_options import POSITION_OPTIONS, flag

RECORD = "position_settings"
# The options that change the function the weights compute (their declarations' ``recorded``).
FUNCTION_OPTIONS = tuple(name for name, option in POSITION_OPTIONS.items() if option.recorded)
FLAGS = ("rpe_per_layer", "dot_product_free", "absolute_positions")
TABLE_KEY = re.compile(r"(^|\.)(position_bias|toeplitz)\.[^.]+$")


def function_settings(cfg) -> Dict[str, object]:
    """The settings of ``cfg`` (resolved, as the model was built) that its position function depends on."""
    kind = position_kind(cfg)
    layout = str(cfg.urpe_toeplitz)
    settings = {"rpe_kind": str(cfg.rpe_kind), "urpe_toeplitz": layout}
    for recipe in (kind, reweighting(cfg)):
        for option in recipe.reads:
            if option not in FUNCTION_OPTIONS:
                continue
            value = getattr(cfg, option, None)
            if option in recipe.defaults:
                value = str(value or recipe.defaults[option])
            settings[option] = value if value is None or isinstance(value, str) else int(value)
    for name in FLAGS:
        settings[name] = bool(getattr(cfg, name, False))
    return settings


def encode(settings: Mapping[str, object]) -> torch.Tensor:
    return torch.tensor(list(json.dumps(dict(settings), sort_keys=True).encode()), dtype=torch.float32)


def decode(record: torch.Tensor) -> Dict[str, object]:
    return json.loads(bytes(int(round(v)) for v in record.detach().float().tolist()).decode())


def check_same_function(stored: Mapping[str, object], built: Mapping[str, object]) -> None:
    """``ValueError`` naming every setting in which the checkpoint (``stored``) and the model (``built``) differ."""
    differ = [name for name in stored if name in built and stored[name] != built[name]]
    if not differ:
        return
    both = "; ".join(f"{flag(name)}: the checkpoint's {stored[name]}, this model's {built[name]}" for name in differ)
    raise ValueError(
        f"the checkpoint was trained with other position settings than this model is built with ({both}): its "
        f"weights would compute another function. Load it with its own settings (drop them from --model-overrides, "
        f"the hub's arguments or the command line)")


def check_finite_tables(state_dict: Mapping[str, torch.Tensor], prefix: str) -> None:
    """``ValueError`` naming the table and heads of any position parameter under ``prefix`` holding NaN or inf."""
    for key, value in state_dict.items():
        if not key.startswith(prefix) or not TABLE_KEY.search(key) or not torch.is_tensor(value):
            continue
        if not value.is_floating_point() or bool(torch.isfinite(value).all()):
            continue
        bad = ~torch.isfinite(value.detach().float())
        heads = bad.reshape(bad.size(0), -1).any(1).nonzero().flatten().tolist() if value.dim() else []
        where = f" at head(s) {', '.join(map(str, heads))}" if heads else ""
        raise ValueError(f"the checkpoint's position table {key} holds NaN or inf{where}: the model would compute "
                         f"NaN. The checkpoint is damaged or its training diverged; use an earlier one")
