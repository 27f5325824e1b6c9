"""How the suite is split among pytest-xdist's processes (pytest.ini: one per core, ``--dist loadgroup
--no-loadscope-reorder``).

Each test file is one group, so its module fixtures are built once; ``tests/cli`` and ``tests/recipes`` are
one group each, because their session fixtures (``trainings``, ``recipe_runs``) start every run those
folders read on first use, and a second process would start them all again; each test of
``PER_TEST_GROUPS`` is a group of its own (no shared fixtures, a minute or more each). The marker is added
as each test is collected, before xdist reads the groups (in its ``pytest_collection_modifyitems``).

Tests marked ``slow`` (over half a CPU-minute each, with the runs they start) are left out of a plain
``pytest`` (pytest.ini) and run by ``scripts/test.sh``, which CI calls: besides the ones marked where they
are defined, every test that reads a run of ``SLOW_FIXTURES`` (the WikiText-103 recipes' trainings, one
training per position kind through the CLIs).

Groups are handed out in the order of the collection, which is sorted here longest first by the seconds in
``tests/group_seconds.json`` (a long group started last would keep one process busy while the other has
nothing left to do; groups not listed go last). The suite writes that file itself:
``URPE_WRITE_GROUP_SECONDS=1 bash scripts/test.sh`` records the seconds of each group it ran (setup, call and teardown
of its tests, as pytest reports them) at the end of the run, keeping the other groups' figures.
"""

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

# One torch thread per process (before any test module imports torch): pytest.ini runs one process per
# core, and two processes of two threads each on two cores make torch many times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED_SESSION_FOLDERS = ("cli", "recipes")
PER_TEST_GROUPS = ("kernels/test_gpu_compile.py",)
SLOW_FIXTURES = ("recipe_runs", "family_runs")
TESTS = Path(__file__).resolve().parent
GROUP_SECONDS = TESTS / "group_seconds.json"
WRITE_GROUP_SECONDS = os.environ.get("URPE_WRITE_GROUP_SECONDS") == "1"
_measured = defaultdict(float)  # group -> seconds of its tests in this run


def recorded_seconds() -> dict:
    return json.loads(GROUP_SECONDS.read_text()) if GROUP_SECONDS.exists() else {}


def group_of(relative_path: str, name: str) -> str:
    """The xdist group of test ``name`` in ``relative_path`` (relative to tests/)."""
    path = Path(relative_path)
    if path.parts[0] in SHARED_SESSION_FOLDERS:
        return path.parts[0]
    if path.as_posix() in PER_TEST_GROUPS:
        return f"{path.as_posix()}::{name}"
    return path.as_posix()


def xdist_group(item) -> str:
    return group_of(Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix(), item.name)


def pytest_itemcollected(item):
    item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    if any(name in SLOW_FIXTURES for name in getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Longest groups first (a stable sort: the collection's order within a group and among the rest)."""
    seconds = recorded_seconds()
    items.sort(key=lambda item: -seconds.get(xdist_group(item), 0))


def pytest_runtest_logreport(report):
    """Adds up each group's seconds (on the controlling process, which sees every worker's reports)."""
    if WRITE_GROUP_SECONDS:
        path, _, name = report.nodeid.partition("::")
        if path.startswith("tests/"):
            _measured[group_of(path[len("tests/"):], name.split("@")[0])] += report.duration


def pytest_sessionfinish(session, exitstatus):
    if WRITE_GROUP_SECONDS and not hasattr(session.config, "workerinput") and _measured:
        seconds = dict(recorded_seconds(), **{group: round(value) for group, value in _measured.items()})
        GROUP_SECONDS.write_text(json.dumps(dict(sorted(seconds.items(), key=lambda kv: -kv[1])), indent=1) + "\n")
