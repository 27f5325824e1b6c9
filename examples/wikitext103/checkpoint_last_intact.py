"""Make sure a rerun resumes from an intact checkpoint_last.pt (used by train.sh before training).

    python checkpoint_last_intact.py SAVE_DIR

fairseq writes the first checkpoint of a save atomically (a .tmp file, then a rename) but makes
checkpoint_last.pt as a plain *copy* of it (checkpoint_utils.save_checkpoint), so a job killed during
that copy leaves a truncated checkpoint_last.pt, on which every rerun then fails. A checkpoint written
by torch.save is a zip archive whose directory sits at its end: truncation is caught by opening it,
without loading anything. If checkpoint_last.pt is not intact, it is moved aside and replaced (copy to a
temporary name, then rename) by the newest intact checkpoint_<epoch>_<updates>.pt or
checkpoint<epoch>.pt of SAVE_DIR, which is what checkpoint_last.pt was a copy of when its save began.
Exit status 0: nothing to resume, or checkpoint_last.pt is (now) intact; 1: it is broken and nothing
intact can replace it (it is left in place, so every rerun stops here until someone decides; the
message says how). Needs only the standard library.
"""

import os
import re
import shutil
import sys
import time
import zipfile


def intact(path):
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("data.pkl") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def main(save_dir):
    last = os.path.join(save_dir, "checkpoint_last.pt")
    if not os.path.exists(last) or intact(last):
        return 0
    print(f"{last} is truncated or unreadable (a copy that was interrupted?)")
    candidates = []
    for name in os.listdir(save_dir):
        if re.fullmatch(r"checkpoint_?\d+(_\d+)?\.pt", name):  # checkpoint<epoch>.pt, checkpoint_<epoch>_<updates>.pt
            path = os.path.join(save_dir, name)
            candidates.append((os.path.getmtime(path), path))
    replacement = next((path for _, path in sorted(candidates, reverse=True) if intact(path)), None)
    if replacement is None:
        print(f"no intact checkpoint<epoch>.pt or checkpoint_<epoch>_<updates>.pt in {save_dir} to resume "
              f"from: delete {last} to start afresh, or put an intact checkpoint in its place", file=sys.stderr)
        return 1
    broken = f"{last}.broken-{time.strftime('%Y%m%d-%H%M%S')}"
    os.replace(last, broken)
    shutil.copyfile(replacement, last + ".tmp")
    os.replace(last + ".tmp", last)
    print(f"moved it to {os.path.basename(broken)}; resuming from {os.path.basename(replacement)} (copied to checkpoint_last.pt)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
