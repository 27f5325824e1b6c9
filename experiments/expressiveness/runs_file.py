"""What the Wang & E runners (appendix_h, prop42, memory_claims) share: their options, their runs file, which
seeds a cell trains next and how models are trained side by side.

A runs file ``OUT/<name>_runs.jsonl`` holds one JSON record per trained model, appended as each finishes, so a
rerun trains only what is missing and ``--no-train`` summarises what is there. A record's ``key`` is its cell's
prefix followed by the seed (``"...|<seed>"``).
"""

import argparse
import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import IO, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from experiments.expressiveness import verdict_rules as rules


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


def seeds_to_train(records: Sequence[dict], dead: Callable[[dict], bool], fixed: Optional[Sequence[int]]) -> List[int]:
    """The seeds a cell with these ``records`` trains next: ``fixed`` minus those done, or, without ``fixed``,
    verdict_rules.next_seeds (the first batch, then more while it has too few live seeds)."""
    done = [seed_of(r) for r in records]
    if fixed is not None:
        return [s for s in fixed if s not in done]
    return rules.next_seeds(done, sum(not dead(r) for r in records))


def train_side_by_side(train: Callable, calls: Iterable[Tuple], jobs: int) -> Iterator[Tuple[Tuple, object]]:
    """``(args, train(*args))`` for every ``args`` of ``calls``: in order where ``jobs <= 1``, else ``jobs`` at
    once in spawned processes (each sets its own threads), as they finish."""
    calls = list(calls)
    if jobs <= 1:
        for args in calls:
            yield args, train(*args)
        return
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(train, *args): args for args in calls}
        for done in as_completed(futures):
            yield futures[done], done.result()
