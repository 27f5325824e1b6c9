"""What the sweeps share (``brown_sweep``, ``run_synthetic``): their common options and presets, and loading
a script that is not in a package. Running fairseq and reading its logs: :mod:`fairseq_urpe.fairseq_runs`."""

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def add_run_options(parser: argparse.ArgumentParser, out: str, jobs_help: str) -> None:
    """``--jobs``, ``--gpu``, ``--extra`` and ``--out`` (default ``out``) of a sweep of fairseq-train runs."""
    parser.add_argument("--jobs", type=int, default=2, help=jobs_help)
    parser.add_argument("--gpu", action="store_true", help="train on the GPU (default: --cpu)")
    parser.add_argument("--extra", default="", help="more fairseq-train flags for every run")
    parser.add_argument("--out", default=out)


def fill_from_preset(args: argparse.Namespace, preset: dict) -> argparse.Namespace:
    """Every option of ``preset`` that the command line left ``None`` takes the preset's value."""
    for key, value in preset.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return args


def load_script(path: Path) -> ModuleType:
    """The Python file at ``path`` as a module (a script outside any package, e.g. an example's). Its folder
    goes on ``sys.path`` first, as when the script runs, so the modules beside it import."""
    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
