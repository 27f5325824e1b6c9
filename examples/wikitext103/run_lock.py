"""One training per run folder and node: a lock file, ``train.lock`` (node 0) or ``train.node<R>.lock``.

The file is created atomically (``O_CREAT | O_EXCL``) and holds the holder's pid, host and start time as
JSON. A lock is stale when its holder is on this host and its pid is gone, or is now another program (a pid
reused): it is then replaced, saying so. A lock of another host cannot be checked from here; it is refused
with its holder named, and removing it is left to a person who knows that job is gone. Standard library only.
"""

import json
import os
import socket
import time
from typing import Optional

MARK = "launch_training"  # in the holder's command line (/proc/<pid>/cmdline), where the host has /proc


def lock_path(save_dir: str, node_rank: int) -> str:
    return os.path.join(save_dir, "train.lock" if node_rank == 0 else f"train.node{node_rank}.lock")


def read_holder(path: str) -> Optional[dict]:
    """The lock's holder, or None when there is no lock (or it was being written: treated as no holder)."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"pid": None, "host": "?", "started": "?"}


def alive_here(holder: dict) -> bool:
    """Whether ``holder`` (on this host) is still a running training launcher."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return MARK.encode() in f.read()
    except OSError:
        return True  # no /proc: the pid is alive, assume it is the holder


def describe(holder: dict) -> str:
    return f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"


def stale(holder: dict) -> bool:
    return holder.get("host") == socket.gethostname() and not alive_here(holder)


def refusal(path: str, holder: dict) -> str:
    where = ("it is on another host, so this one cannot tell whether it still runs; if that job is gone, remove "
             f"{path}" if holder.get("host") != socket.gethostname() else "it is still running")
    return f"{path}: this run is being trained already by {describe(holder)} ({where})"


def acquire(path: str, note=print) -> Optional[str]:
    """Take the lock at ``path``: None when taken, else why not (the holder named)."""
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = read_holder(path)
            if holder is None:
                continue
            if not stale(holder):
                return refusal(path, holder)
            note(f"{path}: a stale lock ({describe(holder)}, no longer running); replacing it")
            os.remove(path)
            continue
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, f)
        return None
    return f"{path}: could not take the lock (another launch took it meanwhile: {describe(read_holder(path) or {})})"


def release(path: str) -> None:
    """Remove the lock if it is this process's."""
    holder = read_holder(path)
    if holder and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
        os.remove(path)
