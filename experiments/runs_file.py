"""A study's runs file: ``OUT/<name>_runs.jsonl``, one JSON record per trained model, appended as each finishes,
so that a rerun trains only what is missing and the tables can be written again from it alone.

A record's ``key`` is its cell's key followed by the seed (``"...|<seed>"``); a later record of a key replaces
an earlier one.
"""

import json
from pathlib import Path
from typing import IO, Callable, Dict, List


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


def append_run(log: IO[str], runs: Dict[str, dict], record: dict) -> None:
    """Add ``record`` to ``runs`` and as one line to the open runs file ``log``, flushed (a killed run keeps it)."""
    runs[record["key"]] = record
    log.write(json.dumps(record) + "\n")
    log.flush()


def seed_of(record: dict) -> int:
    return int(record["key"].rsplit("|", 1)[1])


def cell_records(runs: Dict[str, dict], prefix: str) -> List[dict]:
    """The records whose key is ``prefix`` followed by a seed, by seed."""
    return sorted((r for k, r in runs.items() if k.startswith(prefix) and k[len(prefix):].isdigit()), key=seed_of)
