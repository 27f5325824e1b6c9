"""The README's layout section is the map of the repository: every folder it lists exists, and every
top-level folder is listed."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def ignored_folders():
    """The top-level folders .gitignore names (outputs of the scripts, build folders), which need no place in the map."""
    lines = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    return {line.strip("/") for line in lines if line.endswith("/") and "*" not in line}


def layout_folders():
    """``[path]`` of the folders in the layout block, nested entries joined to the top-level one above."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## Layout\n\n```\n(.*?)```", text, re.S).group(1)
    paths, parent = [], None
    for line in block.splitlines():
        match = re.match(r"( *)(\S+/)\s", line + " ")
        if not match:
            continue
        indent, name = len(match.group(1)), match.group(2).rstrip("/")
        if indent == 0:
            parent = name
            paths.append(name)
        else:
            paths.append(f"{parent}/{name}")
    return paths


def test_every_folder_in_the_readme_layout_exists():
    paths = layout_folders()
    assert len(paths) >= 10, paths
    missing = [p for p in paths if not (REPO / p).is_dir()]
    assert not missing, missing


def test_every_top_level_folder_is_in_the_readme_layout():
    listed = {p.split("/")[0] for p in layout_folders()}
    folders = {p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")
               and not p.name.endswith(".egg-info") and p.name not in ignored_folders()}
    assert folders - listed == set(), folders - listed


def test_the_readme_stays_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 160
