"""Reading checkpoints of the per-layer layout: a one-way upgrade, run by fairseq's ``upgrade_state_dict_named``.

Shared ``b``/``c`` are stored once, where they live: ``decoder.position_bias.weight`` (``encoder.`` for
the encoder). Checkpoints of the per-layer layout list them under every layer's ``self_attn`` as equal
copies, ``decoder.layers.<i>.self_attn.position_bias.weight``. fairseq calls
``upgrade_state_dict_named`` on every module of a model before loading a state dict into it (checkpoint
loading, ``fairseq-train --restore-file``, the hub, ``--store-ema``'s averaged copy); the encoder and
decoder call :func:`upgrade_per_layer_layout` there. Nothing else in the model knows about the per-layer layout.

Optimizer states are stored by parameter order, and that layout listed the shared parameters inside layer
0's attention, where the current order does not: resuming such a checkpoint with its optimizer state
would put Adam's moments on the wrong parameters (silently, in fairseq's flat fp16/bf16 optimizer). So
the first step of an optimizer that arrives holding state in a process that upgraded such a checkpoint
stops with an error asking for ``--reset-optimizer`` (the weights load as they are; the optimizer restarts).
"""

import re
import weakref
from typing import Iterable

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

OLD_LAYOUT_OPTIMIZER = (
    "this run resumes a checkpoint that stores the shared position tables under every layer (the per-layer "
    "layout); its optimizer state is in that layout's parameter order, which this "
    "code does not have. Resume with --reset-optimizer: the model's weights load as they are and the "
    "optimizer starts afresh"
)


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
    if moved:
        refuse_restored_optimizer_state()
    return moved


_STEPPED = weakref.WeakSet()  # optimizers that took a step since the hook was registered
_HOOK = []


def refuse_restored_optimizer_state() -> None:
    """From now on in this process, an optimizer whose first step finds it already holding state (restored
    from a checkpoint, i.e. not ``--reset-optimizer``: optimizers make their state in their first step)
    raises :data:`OLD_LAYOUT_OPTIMIZER`. Registered once."""
    if not _HOOK:
        _HOOK.append(register_optimizer_step_pre_hook(_refuse_if_restored))


def _refuse_if_restored(optimizer, args, kwargs) -> None:
    if optimizer in _STEPPED:
        return
    _STEPPED.add(optimizer)
    if any(len(state) for state in optimizer.state.values()):
        raise RuntimeError(OLD_LAYOUT_OPTIMIZER)
