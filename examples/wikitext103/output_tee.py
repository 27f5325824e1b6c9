"""Send this process's output, and its children's, to a log file as well (``tee -a``), at the file-descriptor
level, so that what C code and subprocesses write goes there too (train.sh and eval.sh's Python sides)."""

import os
import subprocess
import sys
from contextlib import contextmanager


@contextmanager
def output_teed_to(log):
    """Within the block, stdout and stderr also go to ``log`` (appended); at its end, wait for the log to
    be written (at most 30 s: data-loader workers that outlive the block may hold the pipe)."""
    tee = subprocess.Popen(["tee", "-a", log], stdin=subprocess.PIPE)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(tee.stdin.fileno(), 1)
    os.dup2(tee.stdin.fileno(), 2)
    tee.stdin.close()
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.close(1)
        os.close(2)
        try:
            tee.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
