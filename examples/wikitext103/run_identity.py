"""What defines a WikiText-103 run: its folder name, and the settings a resumed run must share.

A run is named by what makes it a different experiment (``run_name``):

    <arch>-L<tokens per sample>-batch<tokens per update>[-init_<RPE_INIT>]-seed<seed>-<words | spm<VOCAB>>-<fp16 | fp32>[-smoke]

``-init_<RPE_INIT>`` only for archs whose position kind learns a bias from ``--rpe-init`` (the plugin's
registry says which: ``"rpe_init" in POSITION_KINDS[kind].reads``); for the others RPE_INIT changes
nothing, so it does not make another run.

``differences(saved, current)`` compares two fairseq configs (``checkpoint["cfg"]`` and the config the
current command gives, both as plain dicts) setting by setting: the arch and its model options, the block length,
the data folder (BPE/VOCAB), the tokens per update (``--max-tokens`` x world size x ``--update-freq``), the
optimizer and the whole learning-rate schedule, the seed and the precision. The world size and the counts
derived from it (``--update-freq``, ``--max-tokens`` per device) are not compared: a run resumes on another
number of devices, or nodes, that keeps its tokens per update.
Model options the model derives when it is built, or that only choose how the same function is computed
(``NOT_COMPARED``), are left out.
``--max-update`` is not among them: a run may be extended (its schedule, ``--lr-period-updates``, is).
"""

import os
from typing import Callable, Dict, List, Optional, Tuple

# Model options not compared: those that change how the same function is computed or stored, and those the
# model's build_model derives from compared ones (max_target_positions from L, no_token_positional_embeddings
# from absolute_positions). An option the current command leaves at None is derived at build time too.
NOT_COMPARED = {"urpe_attention_impl", "checkpoint_activations", "offload_activations", "min_params_to_wrap", "tpu",
                "max_target_positions", "no_token_positional_embeddings", "_name"}


def precision(common: dict) -> str:
    """The recipe's PRECISION of a fairseq ``common`` config: fp16, bf16, amp (fp16 autocast) or fp32."""
    if common.get("bf16") or common.get("memory_efficient_bf16"):
        return "bf16"
    if common.get("fp16") or common.get("memory_efficient_fp16"):
        return "fp16"
    return "amp" if common.get("amp") else "fp32"


def tokens_per_update(cfg: dict) -> int:
    return (cfg["dataset"]["max_tokens"] * cfg["distributed_training"]["distributed_world_size"]
            * cfg["optimization"]["update_freq"][0])


def data_folder(cfg: dict) -> str:
    return os.path.basename(os.path.normpath(cfg["task"]["data"]))


# (name shown in a refusal, what reads it from a config); the name is the recipe's knob where there is one.
SETTINGS: List[Tuple[str, Callable[[dict], object]]] = [
    ("ARCH (--arch)", lambda c: c["model"]["_name"]),
    ("TOKENS_PER_SAMPLE (--tokens-per-sample)", lambda c: c["task"]["tokens_per_sample"]),
    ("--sample-break-mode", lambda c: c["task"]["sample_break_mode"]),
    ("BPE/VOCAB (the data-bin folder)", data_folder),
    ("BATCH_TOKENS (--max-tokens x devices x --update-freq)", tokens_per_update),
    ("SEED (--seed)", lambda c: c["common"]["seed"]),
    ("PRECISION", lambda c: precision(c["common"])),
    ("--optimizer", lambda c: c["optimizer"]["_name"]),
    ("--momentum", lambda c: c["optimizer"].get("momentum")),
    ("--weight-decay", lambda c: c["optimizer"].get("weight_decay")),
    ("--clip-norm", lambda c: c["optimization"]["clip_norm"]),
    ("--criterion", lambda c: c["criterion"]["_name"]),
    ("LR (--lr)", lambda c: list(c["optimization"]["lr"])),
    ("--lr-scheduler", lambda c: c["lr_scheduler"]["_name"]),
    ("WARMUP_UPDATES (--warmup-updates)", lambda c: c["lr_scheduler"].get("warmup_updates")),
    ("--warmup-init-lr", lambda c: c["lr_scheduler"].get("warmup_init_lr")),
    ("LR_PERIOD_UPDATES (--lr-period-updates)", lambda c: c["lr_scheduler"].get("lr_period_updates")),
    ("--t-mult", lambda c: c["lr_scheduler"].get("t_mult")),
    ("--lr-shrink", lambda c: c["lr_scheduler"].get("lr_shrink")),
    ("--min-lr", lambda c: c["lr_scheduler"].get("min_lr")),
    ("--stop-min-lr", lambda c: c["optimization"].get("stop_min_lr")),
]


def option_name(field: str) -> str:
    names = {"rpe_init": "RPE_INIT (--rpe-init)"}
    return names.get(field, "--" + field.replace("_", "-"))


def differences(saved: dict, current: dict) -> List[Tuple[str, object, object]]:
    """``[(setting, saved value, current value)]`` for every setting that differs. A model option that
    only one of the two configs has (one the plugin added or dropped since) is not compared."""
    found = []
    for name, read in SETTINGS:
        before, now = read(saved), read(current)
        if before != now:
            found.append((name, before, now))
    saved_model, current_model = saved["model"], current["model"]
    for field in sorted(set(saved_model) & set(current_model) - NOT_COMPARED):
        if current_model[field] is not None and saved_model[field] != current_model[field]:
            found.append((option_name(field), saved_model[field], current_model[field]))
    return found


def batch_layouts(batch_tokens, world, length, max_tokens):
    """``[(max_tokens, update_freq)]`` that make exactly ``batch_tokens`` per update on ``world`` devices with
    batches of whole blocks of ``length`` tokens, at most ``max_tokens`` per device, largest batch first."""
    if batch_tokens % world:
        return []
    per_device = batch_tokens // world
    top = min(max_tokens, per_device) // length * length
    return [(m, per_device // m) for m in range(top, 0, -length) if per_device % m == 0]


def run_name(arch: str, tokens_per_sample: int, batch_tokens: int, rpe_init: Optional[str], seed: int, bpe: str,
             vocab: int, precision_name: str, smoke: bool) -> str:
    """The folder name of a run (module doc); ``rpe_init`` None where the arch learns no bias from it."""
    parts = [arch, f"L{tokens_per_sample}", f"batch{batch_tokens}"]
    if rpe_init is not None:
        parts.append(f"init_{rpe_init}")
    parts += [f"seed{seed}", f"spm{vocab}" if bpe == "sentencepiece" else "words", precision_name]
    if smoke:
        parts.append("smoke")
    return "-".join(parts)


def learns_from_rpe_init(kind: str) -> bool:
    """Whether the position kind ``kind`` learns a bias that ``--rpe-init`` starts (the registry's word)."""
    from fairseq_urpe.models.position_kinds import POSITION_KINDS

    return "rpe_init" in POSITION_KINDS[kind].reads


def arch_kind(arch: str) -> Optional[Dict[str, object]]:
    """``{"plugin": bool, "kind": --rpe-kind or None, "learns_from_rpe_init": bool}`` of a registered arch,
    ``None`` for an arch fairseq does not know. Imports fairseq and the plugin."""
    import argparse

    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_urpe.models.architectures import ARCHITECTURES

    if arch in ARCHITECTURES:
        args = argparse.Namespace()
        ARCHITECTURES[arch](args)  # the arch's defaults, as fairseq-train applies them
        kind = str(args.rpe_kind)
        return {"plugin": True, "kind": kind, "learns_from_rpe_init": learns_from_rpe_init(kind)}
    if arch in ARCH_MODEL_REGISTRY:
        return {"plugin": False, "kind": None, "learns_from_rpe_init": False}
    return None


def language_model_archs() -> List[str]:
    """Every registered ``transformer_lm*`` arch (for an error that names the known ones)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    return sorted(name for name in ARCH_MODEL_REGISTRY if name.startswith("transformer_lm"))
