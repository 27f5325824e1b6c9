"""The loop every study runs: its options, the seeds each cell trains next, training side by side with each model
recorded as it finishes (``runs_file``), and its tables written from every record.

A study that trains models over seeds declares a :class:`Study` (what it trains, what a record holds, its tables)
and its :class:`Cell` list; ``Study.run`` reads ``OUT/<name>_runs.jsonl``, trains in rounds until no cell has
seeds left to train (skipped with ``--no-train``), then writes ``OUT/<name>.md`` and ``OUT/<name>.json`` from the
records alone, so ``--no-train`` writes the same tables again from a committed runs file:

    study = Study("prop42", keep=..., train=train_eval, record=..., describe=..., dead=is_dead,
                  next_seeds=verdict_rules.next_seeds, tables=...)
    study.run(options, cells)

A sweep of fairseq runs with its own records (``language_modeling.brown_sweep``, ``run_synthetic``) uses
``train_side_by_side`` and ``write_tables`` alone.
"""

import argparse
import json
import multiprocessing
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from experiments.runs_file import append_run, cell_records, read_runs, seed_of


def add_study_options(parser: argparse.ArgumentParser, out: str = "docs/expressiveness") -> None:
    """``--seeds``, ``--jobs``, ``--out`` and ``--no-train`` (each study adds ``--smoke`` and its own)."""
    parser.add_argument("--seeds", default=None, help="exactly these seeds (default: the study's next_seeds: the first "
                                                      "batch, then more while a cell has too few live seeds)")
    parser.add_argument("--jobs", type=int, default=2, help="models trained at once, one thread each")
    parser.add_argument("--out", default=out)
    parser.add_argument("--no-train", action="store_true", help="only summarise the models already in the runs file")


class Cell(NamedTuple):
    """One configuration a study trains over seeds."""

    key: str  # its records' key up to the seed ("...|"); a record's key is key + str(seed)
    args: tuple  # what the study's train takes before the seed (or the list of seeds)
    about: Any = None  # what the study's record and describe read back (its table, row, config)


def seeds_to_train(records: Sequence[dict], dead: Callable[[dict], bool], fixed: Optional[Sequence[int]],
                   next_seeds: Callable[[Sequence[int], int], List[int]]) -> List[int]:
    """The seeds a cell with these ``records`` trains next: ``fixed`` minus those done, or, without ``fixed``,
    ``next_seeds(seeds done, live seeds)``."""
    done = [seed_of(r) for r in records]
    if fixed is not None:
        return [s for s in fixed if s not in done]
    return next_seeds(done, sum(not dead(r) for r in records))


def train_side_by_side(train: Callable, calls: Iterable[Tuple], jobs: int,
                       threads: bool = False) -> Iterator[Tuple[Tuple, object]]:
    """``(args, train(*args))`` for every ``args`` of ``calls``: in order where ``jobs <= 1``, else ``jobs`` at once
    as they finish, in spawned processes (each sets its own threads) or, with ``threads``, in threads of this
    process (for a ``train`` that waits on a child process)."""
    calls = list(calls)
    if jobs <= 1:
        for args in calls:
            yield args, train(*args)
        return
    pool: Executor = (ThreadPoolExecutor(jobs) if threads
                      else ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")))
    with pool:
        futures = {pool.submit(train, *args): args for args in calls}
        for done in as_completed(futures):
            yield futures[done], done.result()


def write_tables(out: Path, name: str, text: str, data: dict) -> None:
    """``OUT/<name>.md`` (``text``, a newline added where it does not end in one) and ``OUT/<name>.json``
    (``data``, indent 1, no newline at the end)."""
    (out / f"{name}.md").write_text(text if text.endswith("\n") else text + "\n")
    (out / f"{name}.json").write_text(json.dumps(data, indent=1))


def model_seconds(runs: Dict[str, dict]) -> float:
    """The training seconds of every recorded model, summed."""
    return sum(r["seconds"] for r in runs.values())


@dataclass
class Study:
    """What a study declares for ``run``.

    ``train(*cell.args, seed)`` trains one model and returns its result; with ``together``,
    ``train(*cell.args, seeds)`` trains a cell's seeds at once and returns one result per seed.
    ``record(cell, seed, result)`` is what the runs file keeps of it (its ``key`` is added in front);
    ``describe(cell, record)`` its progress line. ``tables(runs)`` is ``(markdown, json data)`` from every record.
    """

    name: str  # OUT/<name>_runs.jsonl, OUT/<name>.md, OUT/<name>.json
    keep: Callable[[dict], bool]  # the records of this size (others stay in the file, unread)
    train: Callable
    record: Callable[[Cell, int, Any], dict]
    describe: Callable[[Cell, dict], str]
    dead: Callable[[dict], bool]  # a failed optimisation, counted per cell (verdict_rules.dead)
    next_seeds: Callable[[Sequence[int], int], List[int]]  # the seeds a cell trains next without --seeds
    tables: Callable[[Dict[str, dict]], Tuple[str, dict]]
    together: bool = False

    def runs_path(self, out: Path) -> Path:
        return out / f"{self.name}_runs.jsonl"

    def read(self, out: Path) -> Dict[str, dict]:
        """The records of the runs file that ``keep`` accepts."""
        return read_runs(self.runs_path(out), self.keep)

    def train_rounds(self, out: Path, runs: Dict[str, dict], cells: Sequence[Cell], fixed: Optional[Sequence[int]],
                     jobs: int) -> int:
        """Rounds until no cell has seeds to train: each cell trains its next seeds (seeds_to_train), ``jobs`` at
        once, each model appended to ``runs`` and the runs file as it finishes. The number of models trained."""
        trained = 0
        with open(self.runs_path(out), "a") as log:
            while True:
                todo = [(cell, seeds) for cell in cells
                        if (seeds := seeds_to_train(cell_records(runs, cell.key), self.dead, fixed, self.next_seeds))]
                if not todo:
                    return trained
                models = sum(len(seeds) for _, seeds in todo)
                print(f"round: {models} models of {len(todo)} cells, {jobs} at once", flush=True)
                trained += models
                calls = ([(cell, seeds, (*cell.args, seeds)) for cell, seeds in todo] if self.together
                         else [(cell, [seed], (*cell.args, seed)) for cell, seeds in todo for seed in seeds])
                owner = {id(args): (cell, seeds) for cell, seeds, args in calls}
                for args, result in train_side_by_side(self.train, [args for _, _, args in calls], jobs):
                    cell, seeds = owner[id(args)]
                    for seed, one in zip(seeds, result if self.together else [result]):
                        record = {"key": f"{cell.key}{seed}", **self.record(cell, seed, one)}
                        append_run(log, runs, record)
                        print(self.describe(cell, record), flush=True)

    def run(self, options: argparse.Namespace, cells: Sequence[Cell]) -> Dict[str, dict]:
        """The whole loop under the options of add_study_options: read, train what ``cells`` still need (nothing
        with ``--no-train``), print and write the tables. The records."""
        out = Path(options.out)
        out.mkdir(parents=True, exist_ok=True)
        fixed = None if options.seeds is None else [int(s) for s in options.seeds.split()]
        runs = self.read(out)
        start = time.time()
        trained = 0 if options.no_train else self.train_rounds(out, runs, cells, fixed, options.jobs)
        text, data = self.tables(runs)
        print(text)
        print(f"this invocation: {trained} models, {options.jobs} at once, {(time.time() - start) / 60:.1f} min wall",
              flush=True)
        write_tables(out, self.name, text, data)
        return runs
