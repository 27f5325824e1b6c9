"""Reading the checkpoints that tests train or keep, as data: the file through
``fairseq_urpe.checkpoint_file.read_checkpoint`` (weights-only; a file that needs code to load is refused),
and what the tests read from it."""

from pathlib import Path
from typing import Dict, Union

from fairseq_urpe.checkpoint_file import read_checkpoint


def load_checkpoint(path: Union[str, Path]) -> dict:
    """The checkpoint at ``path`` as a dict on the CPU, read into memory (not mapped) and never unpickling code."""
    return read_checkpoint(path, trust_code=False, mmap=False)


def num_updates(checkpoint: dict) -> int:
    """The updates its training had done: fairseq's ``optimizer_history[-1]["num_updates"]``."""
    return checkpoint["optimizer_history"][-1]["num_updates"]


def weights(checkpoint: dict) -> Dict[str, "object"]:
    """The model's parameters: floating-point tensors, without fairseq's ``_float_tensor`` buffers
    (uninitialised one-element placeholders, different in every process)."""
    return {k: v for k, v in checkpoint["model"].items() if v.is_floating_point() and not k.endswith("_float_tensor")}
