"""Reading checkpoints of the per-layer layout: a one-way upgrade, run by fairseq's ``upgrade_state_dict_named``.

Shared ``b``/``c`` are stored once, where they live: ``decoder.position_bias.weight`` (``encoder.`` for
the encoder). Checkpoints of the per-layer layout list them under every layer's ``self_attn`` as equal
copies, ``decoder.layers.<i>.self_attn.position_bias.weight``. fairseq calls
``upgrade_state_dict_named`` on every module of a model before loading a state dict into it (checkpoint
loading, ``fairseq-train --restore-file``, the hub, ``--store-ema``'s averaged copy); the encoder and
decoder call :func:`upgrade_per_layer_layout` there.

Optimizer states are stored by parameter order, and that layout listed the shared parameters inside layer
0's attention, right after its projections, where the current order lists them after everything else.
So a model that loads such a checkpoint keeps that layout's parameter order (:func:`per_layer_order`):
the optimizer fairseq builds after loading the weights then lines up with the moments the checkpoint
holds, and training resumes as it was. The state dict marks such a model (:data:`ORDER_MARK`), so its
own checkpoints, whose optimizer state follows the same order, load back the same way. Nothing outside
the model is touched.
"""

import re
from typing import Iterable, Iterator, List, Tuple

import torch
from torch import nn

ORDER_MARK = "per_layer_parameter_order"  # a buffer of the encoder/decoder: its parameters in that layout's order


def upgrade_per_layer_layout(state_dict: dict, prefix: str, slots: Iterable[str]) -> bool:
    """In place: ``{prefix}layers.<i>.self_attn.{slot}.X`` (equal in every layer) becomes ``{prefix}{slot}.X``
    for each shared ``slot``; returns whether anything moved. Copies that differ (a checkpoint trained with
    ``--rpe-per-layer``) raise ``ValueError`` naming the option."""
    moved = False
    for slot in slots:
        pattern = re.compile(re.escape(prefix) + r"layers\.(\d+)\.self_attn\." + re.escape(slot) + r"\.(.+)")
        copies = {}
        for key in list(state_dict):
            match = pattern.fullmatch(key)
            if match:
                copies.setdefault(match.group(2), []).append(state_dict.pop(key))
        for rest, values in copies.items():
            if any(not torch.equal(v, values[0]) for v in values[1:]):
                raise ValueError(
                    f"the checkpoint holds a different {prefix}layers.<i>.self_attn.{slot}.{rest} in each layer "
                    f"(trained with --rpe-per-layer?) but this model shares one set: load it with --rpe-per-layer"
                )
            state_dict[f"{prefix}{slot}.{rest}"] = values[0]
            moved = True
    return moved


def mark_per_layer_order(owner: nn.Module, state_dict: dict, prefix: str) -> None:
    """Give ``owner`` (an encoder/decoder) the per-layer layout's parameter order and the buffer that says so,
    and put that buffer in ``state_dict`` (for a strict load)."""
    if ORDER_MARK not in owner._buffers:
        owner.register_buffer(ORDER_MARK, torch.tensor(1.0))  # float: fp16 and fairseq's EMA carry it as it is
    state_dict.setdefault(f"{prefix}{ORDER_MARK}", torch.tensor(1.0))


def per_layer_order(modules: List[Tuple[str, nn.Module]], shared: List[nn.Module], first_attention: nn.Module,
                    prefix: str) -> Iterator[Tuple[str, nn.Module]]:
    """``modules`` (``named_modules()``'s list) with the ``shared`` modules and their children moved to right
    after ``first_attention``'s own children: where the per-layer layout registered them, so parameters()
    lists them in that layout's order."""
    shared_names = {name for name, module in modules if any(module is m for m in shared)}
    inside = [(n, m) for n, m in modules if any(n == s or n.startswith(s + ".") for s in shared_names)]
    rest = [(n, m) for n, m in modules if not any(n == s or n.startswith(s + ".") for s in shared_names)]
    attention = next((n for n, m in rest if m is first_attention), None)
    if attention is None or not inside:
        yield from modules
        return
    last = max(i for i, (n, _) in enumerate(rest) if n == attention or n.startswith(attention + "."))
    yield from rest[: last + 1]
    yield from inside
    yield from rest[last + 1 :]
