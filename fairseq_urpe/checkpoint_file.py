"""Reading a checkpoint file as data: the one way the package, the recipes and the studies open checkpoints.

A checkpoint is a pickle, and a pickle can call any function while it loads. So every load is
``torch.load(weights_only=True)``: tensors, plain containers and numbers, plus the classes of
:data:`ALLOWED_GLOBALS` (what fairseq checkpoints hold besides those: older fairseq versions store their
arguments as an ``argparse.Namespace``). A file that needs anything else is refused, naming the global
it asks for and the opt-in. Loading it anyway (full unpickling, which runs whatever the file carries) is
only done where the caller asks for it explicitly: ``trust_code=True``, or the environment variable
``TRUST_CHECKPOINT_CODE=1`` set before the command starts; the warning is printed before the load.

    read_checkpoint(path)        the checkpoint's dict (our own loads)
    checkpoint_loading(path)     a block inside which fairseq's own loader (``load_checkpoint_to_cpu``,
                                 ``fairseq-eval-lm``'s main, the hub) reads ``path`` by the same rules
"""

import argparse
import os
import pickle
import re
import sys
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Union

import torch

TRUST_VARIABLE = "TRUST_CHECKPOINT_CODE"
ALLOWED_GLOBALS = (argparse.Namespace,)  # what fairseq checkpoints hold besides tensors and plain values
_FORCE_UNSAFE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"  # torch's own switch, used only inside a trusted block


class UntrustedCheckpoint(pickle.UnpicklingError):
    """A checkpoint that needs more than data to load, refused without the opt-in."""


def trusts_code(trust_code: Optional[bool] = None) -> bool:
    """``trust_code`` if given, else whether ``TRUST_CHECKPOINT_CODE=1`` is set."""
    if trust_code is not None:
        return bool(trust_code)
    return os.environ.get(TRUST_VARIABLE, "").strip() == "1"


def check_file(path: Union[str, Path]) -> Path:
    """``path`` as a Path; ``FileNotFoundError`` / ``ValueError`` naming it if it is missing, not a file or empty."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path}: no such file")
    if not path.is_file():
        raise ValueError(f"checkpoint {path} is not a file")
    if path.stat().st_size == 0:
        raise ValueError(f"checkpoint {path} is empty (0 bytes): an interrupted save? Use another checkpoint")
    return path


def _needs_code(error: pickle.UnpicklingError) -> bool:
    """Whether torch's weights-only unpickler refused the file for what it asks for (not a damaged file)."""
    return "Weights only load failed" in str(error)


def _refusal(path: Path, error: Exception) -> UntrustedCheckpoint:
    found = re.search(r"Unsupported global: GLOBAL (\S+)", str(error))
    asks = f"it asks for {found.group(1)}" if found else str(error).strip().splitlines()[-1][:200]
    return UntrustedCheckpoint(
        f"checkpoint {path} holds more than tensors and plain values ({asks}), and loading it would run code "
        f"that the file carries. Refused. If you trust where the file came from, set {TRUST_VARIABLE}=1 "
        f"(or pass --trust-checkpoint-code where the command has it) to load it with full unpickling")


def _warn_trusted(path: Path) -> None:
    print(f"WARNING: {TRUST_VARIABLE}: loading {path} with full unpickling: any code the file carries runs now",
          file=sys.stderr, flush=True)


def read_checkpoint(path: Union[str, Path], trust_code: Optional[bool] = None, mmap: Optional[bool] = None) -> dict:
    """The checkpoint at ``path`` (on the CPU) as a dict, loaded as data (see the module).

    ``mmap``: map the tensors instead of reading them (default: where the file is torch's zip layout).
    Raises ``FileNotFoundError`` / ``ValueError`` naming the file when it is missing, empty or truncated,
    and :class:`UntrustedCheckpoint` naming the opt-in when it needs code to load.
    """
    path = check_file(path)
    zipped = zipfile.is_zipfile(path)
    try:
        with torch.serialization.safe_globals(list(ALLOWED_GLOBALS)):
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipped if mmap is None else mmap)
    except pickle.UnpicklingError as error:
        if not _needs_code(error):
            raise ValueError(f"checkpoint {path} cannot be read ({error}): a truncated or damaged file?") from error
        if not trusts_code(trust_code):
            raise _refusal(path, error) from None
        _warn_trusted(path)
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (EOFError, RuntimeError) as error:
        raise ValueError(f"checkpoint {path} cannot be read ({type(error).__name__}: {str(error)[:200]}): "
                         f"a truncated or damaged file?") from error
    if not isinstance(state, dict):
        raise ValueError(f"checkpoint {path} holds a {type(state).__name__}, not a checkpoint's dict")
    return state


@contextmanager
def checkpoint_loading(path: Union[str, Path], trust_code: Optional[bool] = None) -> Iterator[None]:
    """Inside the block, ``torch.load`` (fairseq's loader's too) reads checkpoints by this module's rules:
    weights-only with :data:`ALLOWED_GLOBALS`; with the opt-in, full unpickling (torch's own switch, set
    for the block only and restored after). ``path`` is checked first (missing or empty files are named)
    and named by the refusal. Only for code that loads ``path`` through a loader it does not own."""
    path = check_file(path)
    if trusts_code(trust_code):
        _warn_trusted(path)
        before = os.environ.get(_FORCE_UNSAFE)
        os.environ[_FORCE_UNSAFE] = "1"
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(_FORCE_UNSAFE, None)
            else:
                os.environ[_FORCE_UNSAFE] = before
        return
    try:
        with torch.serialization.safe_globals(list(ALLOWED_GLOBALS)):
            yield
    except pickle.UnpicklingError as error:
        if not _needs_code(error):
            raise
        raise _refusal(path, error) from None
