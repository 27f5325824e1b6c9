"""How the suite is split among pytest-xdist's processes (``scripts/test.sh`` runs ``--dist loadgroup``).

Each test file is one group, so its module fixtures are built once; ``tests/cli`` and ``tests/recipes`` are
one group each, because their session fixtures (``trainings``, ``recipe_runs``) start every run those
folders read on first use, and a second process would start them all again. The marker is added as each
test is collected, before xdist reads the groups (in its ``pytest_collection_modifyitems``).
"""

from pathlib import Path

import pytest

SHARED_SESSION_FOLDERS = ("cli", "recipes")
TESTS = Path(__file__).resolve().parent


def pytest_itemcollected(item):
    path = Path(str(item.fspath)).resolve().relative_to(TESTS)
    group = path.parts[0] if path.parts[0] in SHARED_SESSION_FOLDERS else str(path)
    item.add_marker(pytest.mark.xdist_group(group))
