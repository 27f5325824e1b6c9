"""Make sure a rerun resumes from the newest intact checkpoint (used by train.sh before training).

    python checkpoint_last_intact.py SAVE_DIR

fairseq writes the first file of a save atomically (a .tmp file, then a rename) and makes the others
(checkpoint_best.pt, checkpoint_last.pt) as plain *copies* of it (checkpoint_utils.save_checkpoint): a
job killed during a copy, or a disk that fills up during one, leaves a truncated file, and the copy it
was making may be newer than checkpoint_last.pt. Every checkpoint of SAVE_DIR (last, best,
checkpoint_<epoch>_<updates>.pt, checkpoint<epoch>.pt) is read for the update count stored inside it
(``stored_updates``: ``optimizer_history[-1]["num_updates"]``; a file that cannot be read is not
intact). If the newest intact one is not checkpoint_last.pt, it is copied there (to a temporary name,
then a rename, after checking the disk has room), a truncated checkpoint_last.pt first moved aside, never
deleted. Exit status 0: nothing to resume, or checkpoint_last.pt is (now) the newest intact state; 1:
nothing intact is there, or no room for the copy (checkpoint_last.pt is left in place, so every rerun
stops here until someone decides; the message says how, without deleting anything).
"""

import os
import re
import shutil
import sys
import time
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the plugin
from fairseq_urpe.checkpoint_file import read_checkpoint  # noqa: E402  (isort: skip)

CHECKPOINT = re.compile(r"checkpoint(_last|_best|_?\d+(_\d+)?)\.pt")


def read_state(path: str) -> Optional[dict]:
    """A checkpoint's contents (tensors memory-mapped, not read), read as data (``fairseq_urpe.checkpoint_file``,
    never running code it carries); None when the file is empty, truncated or cannot be read that way."""
    try:
        return read_checkpoint(path, trust_code=False)
    except Exception:  # truncated, not a checkpoint, or holding more than data: not intact here
        return None


def stored_updates(path: str) -> Optional[int]:
    """The update count a checkpoint stores, or None when it is not intact."""
    state = read_state(path)
    try:
        return int(state["optimizer_history"][-1]["num_updates"])
    except (TypeError, KeyError, IndexError, ValueError):
        return None


def checkpoints(save_dir: str):
    return sorted(os.path.join(save_dir, name) for name in os.listdir(save_dir) if CHECKPOINT.fullmatch(name))


def newest_intact(save_dir: str) -> Optional[str]:
    """The checkpoint of ``save_dir`` with the most updates stored (checkpoint_last.pt on a tie), None if none."""
    last = os.path.join(save_dir, "checkpoint_last.pt")
    counted = [(n, path == last, path) for path in checkpoints(save_dir) for n in [stored_updates(path)] if n is not None]
    return max(counted)[2] if counted else None


def main(save_dir: str) -> int:
    last = os.path.join(save_dir, "checkpoint_last.pt")
    if not os.path.exists(last):
        return 0
    newest = newest_intact(save_dir)
    if newest == last:
        return 0
    broken = stored_updates(last) is None
    if newest is None:
        print(f"{last} is truncated or unreadable, and no other intact checkpoint (checkpoint_best.pt, "
              f"checkpoint_<epoch>_<updates>.pt) is in {save_dir}: to start afresh, move it aside (mv {last} "
              f"{last}.broken); to resume, put an intact checkpoint in its place", file=sys.stderr)
        return 1
    updates = stored_updates(newest)
    size, free = os.path.getsize(newest), shutil.disk_usage(save_dir).free
    if free < size:
        print(f"{save_dir}: {free / 1e9:.2f} GB free, less than the {size / 1e9:.2f} GB of {os.path.basename(newest)} "
              f"(update {updates}) that checkpoint_last.pt must become: free space there first", file=sys.stderr)
        return 1
    if broken:
        moved = f"{last}.broken-{time.strftime('%Y%m%d-%H%M%S')}"
        os.replace(last, moved)
        print(f"{last} is truncated or unreadable (a copy that was interrupted?); moved it to "
              f"{os.path.basename(moved)}")
    else:
        print(f"{last} is at update {stored_updates(last)}, {os.path.basename(newest)} at {updates} (a copy to "
              f"checkpoint_last.pt that did not happen)")
    shutil.copyfile(newest, last + ".tmp")
    os.replace(last + ".tmp", last)
    print(f"resuming from {os.path.basename(newest)} (update {updates}, copied to checkpoint_last.pt)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
