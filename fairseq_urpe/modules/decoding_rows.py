"""A decoding step's position rows, as views of tables made once per state of the position modules.

A step of incremental decoding has one query, at position ``S - 1``, and reads per table its ``S`` entries at
distances ``0 .. S - 1`` and the row ``M[h, 0, j] = f_h(S - 1 - j)``. For modules read by distance both are
prefixes of one table over distances ``0 .. N - 1`` (``N >= S``), kept with its columns reversed:

    table     f(0), f(1), ..., f(N - 1)            the step's table: its first S columns
    reversed  f(N - 1), ..., f(1), f(0)            the step's row: its last S columns
    index     N - 1, ..., 1, 0                     the step's (1, S) index: its last S entries

So a step slices instead of evaluating the modules and gathering. The tables are made again when a
parameter or buffer of the modules holds other values than the ones they were made from (compared by value
at each step: they are small, and updates through ``.data``, as fairseq's FP16 optimizer makes them, leave
version counters alone), when a step needs more than ``N`` positions (``N`` doubles, up to the longest distance a module accepts), and
per device and inference mode. Only without gradients: a step with gradients evaluates the modules in its graph.
"""

import weakref
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

FIRST_LENGTH = 64  # positions of the first tables; each rebuild for a longer step doubles it (or more)


@dataclass
class StepRows:
    """One step's views: ``index`` (1, S); per slot ``bias``/``reweight``: ``table`` (H, S) and ``row`` (H, 1, S)."""

    index: Tensor
    tables: Dict[str, Tensor]
    rows: Dict[str, Tensor]


@dataclass
class _Prefixes:
    values: Tuple[Tensor, ...]  # the modules' parameters and buffers the tables were made from
    length: int
    index: Tensor  # (N,): N - 1 .. 0
    tables: Dict[str, Tensor]  # (H, N)
    reversed: Dict[str, Tensor]  # (H, N)


# PositionModules -> {(device, dtype, inference mode): _Prefixes}; weak, so PositionModules stays copyable and
# picklable and its entry goes with it
_PREFIXES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def module_tensors(modules: Dict[str, nn.Module]) -> Tuple[Tensor, ...]:
    """Every parameter and buffer of ``modules``, in a fixed order."""
    return tuple(t for module in modules.values() for t in (*module.parameters(), *module.buffers()))


def same_values(kept: Tuple[Tensor, ...], current: Tuple[Tensor, ...]) -> bool:
    return len(kept) == len(current) and all(
        a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)
        for a, b in zip(kept, current))


def step_rows(owner, modules: Dict[str, nn.Module], src_len: int, device: torch.device) -> StepRows:
    """The views of one decoding step of ``src_len`` positions for ``modules`` ({slot: module read by distance}),
    without gradients; ``owner``: the object the tables are kept for (its PositionModules)."""
    kept = _PREFIXES.setdefault(owner, {})
    key = (device, torch.is_inference_mode_enabled())
    current = module_tensors(modules)
    prefixes: Optional[_Prefixes] = kept.get(key)
    fresh = prefixes is not None and same_values(prefixes.values, current)
    if not fresh or prefixes.length < src_len:
        # longer: double; other values: as long as before (the steps so far needed it); never past a distance a
        # module refuses (its longest_distance), where only a step that needs it raises, as without these tables
        length = max(src_len, FIRST_LENGTH if prefixes is None else prefixes.length * (2 if fresh else 1))
        limits = [m.longest_distance + 1 for m in modules.values() if getattr(m, "longest_distance", None) is not None]
        length = max(src_len, min([length] + limits))
        try:
            tables = {slot: module.by_distance(torch.arange(length, device=device)) for slot, module in modules.items()}
        except ValueError:  # a module that refuses farther distances without saying so: the step's own length
            length = src_len
            tables = {slot: module.by_distance(torch.arange(length, device=device)) for slot, module in modules.items()}
        distances = torch.arange(length, device=device)
        prefixes = kept[key] = _Prefixes(tuple(t.detach().clone() for t in current), length, distances.flip(0),
                                         tables, {slot: table.flip(-1) for slot, table in tables.items()})
    start = prefixes.length - src_len
    return StepRows(prefixes.index[None, start:],
                    {slot: table[:, :src_len] for slot, table in prefixes.tables.items()},
                    {slot: table[:, None, start:] for slot, table in prefixes.reversed.items()})
