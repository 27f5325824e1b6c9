"""``DRY_RUN=1`` of a recipe with its Python side in this process, and the fairseq commands it prints.

``dry_run(script, ...)`` (``python_here`` without DRY_RUN) runs the shell script for real (its knobs, defaults and checks) with a stand-in
interpreter (``stand_in_environment``) that records the one Python command the script ends with, then
runs that command's ``main()`` here: ``launch_training``, ``eval_lm_table`` or ``sweep_runs``, the code the
script's own process would run. fairseq is then imported once for all the dry runs of a session instead
of once per run (about 9 CPU-seconds each on this machine). The commands a dry run prints are parsed with
fairseq's own parsers (``train_args``, ``eval_lm_args``).
"""

import contextlib
import importlib
import io
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

from .conftest import RECIPES, Run, recipe_env

PYTHON_SIDES = ("launch_training", "eval_lm_table", "sweep_runs")


def stand_in_environment(root: Path) -> Path:
    """A folder laid out like the recipes' environment whose ``bin/python`` only records its command line
    (NUL-separated, in ``$RECORDED_COMMAND``) and whose ``bin/fairseq-train`` exists for ``find_venv``."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text('#!/usr/bin/env bash\nprintf \'%s\\0\' "$@" > "$RECORDED_COMMAND"\n')
    (bin_dir / "fairseq-train").write_text("#!/bin/sh\nexit 0\n")
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    return root


def python_side(name: str):
    if str(RECIPES) not in sys.path:
        sys.path.insert(0, str(RECIPES))
    return importlib.import_module(name)


def run_recorded(recorded: Path, cwd: Path) -> Tuple[int, str]:
    """Run the Python command a script ended with (recorded by the stand-in interpreter) in this process,
    from ``cwd``: (exit status, output)."""
    command = recorded.read_bytes().decode().split("\0")[:-1]
    module = python_side(Path(command[0]).stem)
    assert module.__name__ in PYTHON_SIDES, command[0]
    out = io.StringIO()
    code = 0
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = module.main(command[1:]) or 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        os.chdir(previous)
    return code, out.getvalue()


def python_here(script: str, cwd: Path, wt103_dir, environment: Path, **knobs) -> Run:
    """``bash <script>`` with the given knobs, its Python command run in this process (module doc)."""
    recorded = Path(cwd) / ".recorded_command"
    if recorded.exists():
        recorded.unlink()
    env = recipe_env(wt103_dir, **knobs)
    env.update(URPE_VENV=str(environment), RECORDED_COMMAND=str(recorded))
    shell = subprocess.run(["bash", str(RECIPES / script)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
    knob_text = " ".join(f"{k}={v}" for k, v in knobs.items())
    if shell.returncode != 0 or not recorded.exists():
        return Run(f"{knob_text} bash {script}", shell.returncode, shell.stdout, 0.0)
    code, output = run_recorded(recorded, Path(cwd))
    return Run(f"{knob_text} bash {script}", code, shell.stdout + output, 0.0)


def dry_run(script: str, cwd: Path, wt103_dir, environment: Path, **knobs) -> Run:
    """``DRY_RUN=1 bash <script>``, its Python command run in this process (module doc)."""
    return python_here(script, cwd, wt103_dir, environment, DRY_RUN=1, **knobs)


def printed_command(output: str) -> List[str]:
    """The launch command train.sh prints (the line after ``== command...:``), split as the shell would."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("== command"))
    return shlex.split(lines[start + 1])


def fairseq_train_argv(command: List[str]) -> List[str]:
    """fairseq-train's own arguments in a launch command (after torchrun's, with rank 0 for ``$RANK``)."""
    argv = command[command.index("fairseq_cli.train") + 1:] if "fairseq_cli.train" in command else command[1:]
    return ["0" if a == "$RANK" else a for a in argv]


def train_args(output: str):
    """fairseq-train's parse of the command train.sh printed: the Namespace fairseq-train would run with."""
    from fairseq import options

    argv = fairseq_train_argv(printed_command(output))
    return options.parse_args_and_arch(options.get_training_parser(), input_args=argv)


def eval_lm_commands(output: str) -> Dict[Tuple[str, str], List[str]]:
    """``{(split, row name): fairseq-eval-lm arguments}`` that eval.sh prints."""
    found = {}
    for line in output.splitlines():
        if line.startswith("== ") and ": fairseq-eval-lm " in line:
            head, command = line[3:].split(": fairseq-eval-lm ", 1)
            split, name = head.split(": ", 1)
            found[split, name] = shlex.split(command)
    return found


def eval_lm_args(argv: List[str]):
    from fairseq import options

    return options.parse_args_and_arch(options.get_eval_lm_parser(), input_args=argv)
