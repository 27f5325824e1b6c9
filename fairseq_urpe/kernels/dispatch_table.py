"""The measured dispatch table: per call configuration, the attention path that ``auto`` runs.

A GPU run of ``benchmarks/gpu_check.sh`` checks each path against float64, times the ones that passed
and writes, per configuration, the fastest (:func:`fastest`, :func:`write_table`). ``auto`` reads it when
it resolves a configuration (:class:`~.dispatch.StaticDispatch`: an attention module once per device,
dtype and head dim); a configuration the table does not hold, or no table at all, keeps the built-in
order (:mod:`.dispatch`).

A configuration (:func:`table_key`):

    device     the GPU's name (``torch.cuda.get_device_name``), e.g. "NVIDIA H100 80GB HBM3"
    dtype      "float16", "bfloat16" or "float32"
    head_dim   int
    kind       which tables the call reads (:func:`table_kind`): "none" (RoPE, no position term), "bias",
               "urpe" (C over every distance: flex's shifted form), "urpe_tail" (C constant past a
               distance within the length: flex's band form)
    dropout    whether attention dropout is active

The file (JSON): ``{"format": 1, "written_by": ..., "torch": ..., "entries": [{device, dtype, head_dim,
kind, dropout, path, passed: [paths], ms: {path: fwd+bwd milliseconds}}]}``. Where it lives:
``$FAIRSEQ_URPE_DISPATCH_TABLE``, else ``$XDG_CACHE_HOME/fairseq_urpe/dispatch_table.json`` (``~/.cache``
without ``XDG_CACHE_HOME``). Imports only torch.
"""

import functools
import json
import os
from typing import Dict, Iterable, Mapping, NamedTuple, Optional

import torch

FORMAT = 1
PATHS = ("fused", "flex", "dense")
KINDS = ("none", "bias", "urpe", "urpe_tail")
ENVIRONMENT = "FAIRSEQ_URPE_DISPATCH_TABLE"


class TableKey(NamedTuple):
    device: str
    dtype: str
    head_dim: int
    kind: str
    dropout: bool


def table_path() -> str:
    """Where ``auto`` reads the table and gpu_check.sh writes it (see the module doc)."""
    if os.environ.get(ENVIRONMENT):
        return os.environ[ENVIRONMENT]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "fairseq_urpe", "dispatch_table.json")


def table_kind(bias_table: Optional[torch.Tensor], c_table: Optional[torch.Tensor], length: int) -> str:
    """The ``kind`` of a call with these kernel tables (``(H, n)``, the last entry for every distance past it)
    over ``length`` keys."""
    if c_table is not None:
        return "urpe_tail" if 1 <= c_table.size(1) - 1 < length - 1 else "urpe"
    return "bias" if bias_table is not None else "none"


def device_name(device: torch.device) -> str:
    return _device_name(str(device)) if device.type == "cuda" else device.type


@functools.lru_cache(maxsize=None)
def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device))


def table_key(x: torch.Tensor, kind: str, dropout: bool) -> TableKey:
    """The configuration of a call whose ``v`` is ``x`` (B, H, T, d)."""
    return TableKey(*table_key_prefix(x.device, x.dtype, x.size(-1)), kind, bool(dropout))


def table_key_prefix(device: torch.device, dtype: torch.dtype, head_dim: int) -> tuple:
    """``(device, dtype, head_dim)`` of a :class:`TableKey`: what the tensors of a configuration fix."""
    return device_name(device), str(dtype).replace("torch.", ""), int(head_dim)


def fastest(ms: Mapping[str, float], passed: Iterable[str]) -> Optional[str]:
    """The path with the least time among those that ``passed`` their float64 check (``None``: none did)."""
    timed = [(ms[path], path) for path in passed if path in PATHS and ms.get(path) is not None]
    return min(timed)[1] if timed else None


def write_table(path: str, results: Iterable[Mapping], written_by: str) -> Dict:
    """Write the table of ``results`` (each: the :class:`TableKey` fields, ``ms`` {path: ms} and ``passed``
    [paths]) to ``path``. A configuration where no path passed gets no entry (``auto`` keeps its order
    there); the entries of a table already at ``path`` for configurations not in ``results`` are kept, so
    a run cut short by its time budget replaces only what it measured. Returns what it wrote."""
    entries, measured = [], set()
    for result in results:
        key = TableKey(*(result[field] for field in TableKey._fields))
        measured.add(key)
        best = fastest(result["ms"], result["passed"])
        if best is None:
            continue
        entries.append({**key._asdict(), "path": best, "passed": sorted(result["passed"]),
                        "ms": {p: result["ms"][p] for p in sorted(result["ms"]) if result["ms"][p] is not None}})
    if os.path.exists(path):
        read_table(path)  # a file that is not a table raises, naming it, rather than being overwritten
        with open(path) as f:
            kept = [e for e in json.load(f)["entries"] if entry_key(e) not in measured]
        entries = kept + entries
    table = {"format": FORMAT, "written_by": written_by, "torch": torch.__version__, "entries": entries}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(table, f, indent=1)
    os.replace(path + ".tmp", path)
    return table


def entry_key(entry: Mapping) -> TableKey:
    return TableKey(str(entry["device"]), str(entry["dtype"]), int(entry["head_dim"]), str(entry["kind"]),
                    bool(entry["dropout"]))


_READ: Dict[str, tuple] = {}  # path -> (file stamp, {TableKey: path})


def read_table(path: str) -> Dict[TableKey, str]:
    """``{configuration: path}`` of the table at ``path`` (``{}`` where there is none), read again when the
    file changes. A file that is not a table raises ``ValueError`` naming it."""
    try:
        info = os.stat(path)
        stamp = (info.st_mtime_ns, info.st_ino, info.st_size)  # a rewrite (os.replace) is a new file
    except FileNotFoundError:
        return {}
    if path in _READ and _READ[path][0] == stamp:
        return _READ[path][1]
    try:
        with open(path) as f:
            table = json.load(f)
        if table.get("format") != FORMAT:
            raise ValueError(f"format {table.get('format')!r}, not {FORMAT}")
        choices = {}
        for entry in table["entries"]:
            if entry["path"] not in PATHS or entry["kind"] not in KINDS:
                raise ValueError(f"an entry with path {entry['path']!r} and kind {entry['kind']!r}")
            choices[entry_key(entry)] = entry["path"]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"the attention dispatch table {path} is not one gpu_check.sh writes ({error}); remove it "
                         f"or set {ENVIRONMENT} to another file") from error
    _READ[path] = (stamp, choices)
    return choices


def path_for(key: TableKey, path: Optional[str] = None) -> Optional[str]:
    """The measured path of ``key`` in the table at ``path`` (default :func:`table_path`), or ``None``."""
    return read_table(path or table_path()).get(key)
