"""What the Wang & E runners (appendix_h, prop42, memory_claims) share: their options and their runs file.

A runs file ``OUT/<name>_runs.jsonl`` holds one JSON record per trained model, appended as each finishes, so a
rerun trains only what is missing and ``--no-train`` summarises what is there.
"""

import argparse
import json
from pathlib import Path
from typing import Callable, Dict, Optional


def add_runner_options(parser: argparse.ArgumentParser, seeds: Optional[str] = None) -> None:
    """``--seeds``, ``--jobs``, ``--out`` and ``--no-train`` (each runner adds ``--smoke`` and its own). Without
    ``--seeds`` (``seeds`` None) a cell trains the seeds of verdict_rules.SEED_BATCHES it needs."""
    parser.add_argument("--seeds", default=seeds, help="exactly these seeds (default: verdict_rules.SEED_BATCHES: "
                                                       "the first batch, then more while a cell has too few live seeds)")
    parser.add_argument("--jobs", type=int, default=2, help="models trained at once, one thread each")
    parser.add_argument("--out", default="docs/expressiveness")
    parser.add_argument("--no-train", action="store_true", help="only summarise the models already in the runs file")


def read_runs(path: Path, keep: Callable[[dict], bool]) -> Dict[str, dict]:
    """``{record["key"]: record}`` for the records of the runs file at ``path`` that ``keep`` accepts (runs of
    other sizes are left out); empty where there is no file yet."""
    runs = {}
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if keep(record):
                runs[record["key"]] = record
    return runs
