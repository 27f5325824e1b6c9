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

Groups are handed out in the order of the collection, which is sorted here longest first (``SECONDS``,
CPU seconds measured on a 2-core machine; groups not listed last): a long group started last would keep
one process busy while the other has nothing left to do.
"""

import os
from pathlib import Path

import pytest

# One torch thread per process (before any test module imports torch): pytest.ini runs one process per
# core, and two processes of two threads each on two cores make torch many times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED_SESSION_FOLDERS = ("cli", "recipes")
PER_TEST_GROUPS = ("kernels/test_gpu_compile.py",)
SECONDS = {
    "cli": 370, "recipes": 275, "kernels/test_gpu_compile.py::test_kernels_compile_without_register_spills[sm_90]": 85,
    "experiments/test_language_modeling.py": 100, "models/test_position_family.py": 85,
    "kernels/test_dispatch.py": 75, "kernels/test_self_check.py": 75, "kernels/test_gpu_check_script.py": 45,
    "kernels/test_fused_urpe_attention.py": 45, "kernels/test_gpu_compile.py::test_kernels_compile_without_register_spills[sm_80]": 40,
    "kernels/test_far_tiles.py": 35, "kernels/test_kernel_memory_bounds.py": 30,
}
SLOW_FIXTURES = ("recipe_runs", "family_runs")
TESTS = Path(__file__).resolve().parent


def xdist_group(item) -> str:
    path = Path(str(item.fspath)).resolve().relative_to(TESTS)
    if path.parts[0] in SHARED_SESSION_FOLDERS:
        return path.parts[0]
    if path.as_posix() in PER_TEST_GROUPS:
        return f"{path.as_posix()}::{item.name}"
    return path.as_posix()


def pytest_itemcollected(item):
    item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    if any(name in SLOW_FIXTURES for name in getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Longest groups first (a stable sort: the collection's order within a group and among the rest)."""
    items.sort(key=lambda item: -SECONDS.get(xdist_group(item), 0))
