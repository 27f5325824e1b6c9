"""Running fairseq's command-line tools and reading what they log: the one copy that the demo, the
experiments, the examples and the end-to-end tests share.

    run(cmd, log=path)          a process with its output captured (and written to ``log``), timed
    fairseq_command("train")    ``fairseq-train`` of the running interpreter's environment
    train_inner / valid lines   ``| train_inner | {...}`` (JSON log format) or ``loss=5.1, ...`` (simple)
    eval_lm_result(output)      fairseq-eval-lm's ``Evaluated N tokens`` and ``Loss (base 2): L, Perplexity: P``
    mean_std(values)            mean and sample standard deviation (n - 1) of the finite values

Nothing here imports fairseq: it reads text.
"""

import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union


def fairseq_command(tool: str) -> List[str]:
    """``fairseq-<tool>`` beside the running interpreter, else ``python -m fairseq_cli.<tool>``."""
    script = Path(sys.executable).parent / f"fairseq-{tool}"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", f"fairseq_cli.{tool.replace('-', '_')}"]


def fairseq_env(threads: Optional[int] = None, **extra: str) -> Dict[str, str]:
    """This process's environment, unbuffered output and, given ``threads``, that many torch threads."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


@dataclass
class Run:
    cmd: List[str]
    returncode: int
    output: str  # stdout and stderr, interleaved as the process wrote them
    seconds: float  # wall time
    cpu_seconds: float  # user + system time of the process and its children

    def tail(self, chars: int = 4000) -> str:
        return self.output[-chars:]

    def check(self) -> "Run":
        if self.returncode != 0:
            raise AssertionError(f"command failed with exit code {self.returncode}:\n  {' '.join(self.cmd)}\n"
                                 f"--- last output ---\n{self.tail()}")
        return self


def run(cmd: Sequence, log: Optional[Union[str, Path]] = None, env: Optional[Dict[str, str]] = None,
        cwd=None, input: Optional[str] = None, timeout: Optional[float] = None) -> Run:
    """Run ``cmd`` to the end; its output is returned and, with ``log``, written there after the command line."""
    cmd = [str(c) for c in cmd]
    before = os.times()
    start = time.time()
    proc = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env if env is not None else fairseq_env(), cwd=cwd, timeout=timeout)
    seconds = time.time() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    if log is not None:
        Path(log).write_text(" ".join(cmd) + "\n" + proc.stdout)
    return Run(cmd, proc.returncode, proc.stdout, seconds, cpu)


# --- fairseq-train logs ---------------------------------------------------------------------------------

def json_records(log: str, tag: str) -> List[dict]:
    """The JSON records of ``| <tag> | {...}`` lines (``--log-format json``), e.g. tag ``train_inner`` or ``valid``."""
    marker = f"| {tag} |"
    return [json.loads(line[line.index("{"):]) for line in log.splitlines() if marker in line and "{" in line]


def json_curve(log: str, tag: str, x: str, y: str) -> List[Tuple[int, float]]:
    """``[(record[x], record[y])]`` of the ``tag`` records that hold both, e.g. ``("valid", "valid_num_updates", "valid_ppl")``."""
    return [(int(r[x]), float(r[y])) for r in json_records(log, tag) if x in r and y in r]


def train_inner_losses(log: str) -> Dict[int, str]:
    """``{num_updates: loss}`` of the simple-format train_inner lines (the loss kept as the logged string)."""
    return {int(n): loss for loss, n in re.findall(r"\| train_inner \|.* loss=([-\w.]+),.* num_updates=(\d+),", log)}


def valid_results(log: str, subset: str = "valid") -> List[Tuple[float, float, int]]:
    """``[(loss base 2, ppl, num_updates)]`` of every simple-format validation of ``subset``, in order."""
    pattern = rf"\| valid on '{subset}' subset \| loss ([-\w.]+) \| ppl ([-\w.]+) \|.*?\| num_updates (\d+)"
    return [(float(loss), float(ppl), int(n)) for loss, ppl, n in re.findall(pattern, log)]


def valid_losses(log: str, subset: str = "valid") -> List[float]:
    """Base-2 losses of every validation fairseq-train logged (any log format but JSON), in order."""
    return [float(x) for x in re.findall(rf"valid on '{subset}' subset \| loss ([-\w.]+) \|", log)]


def model_params(log: str) -> int:
    """fairseq's count of the model's parameters (``num. shared model params``), as train and eval-lm log it."""
    return int(re.search(r"num\. shared model params: ([\d,]+)", log).group(1).replace(",", ""))


# --- fairseq-eval-lm ------------------------------------------------------------------------------------

@dataclass
class EvalLm:
    tokens: int
    loss: float  # base 2
    ppl: float


def eval_lm_result(output: str) -> EvalLm:
    """fairseq-eval-lm's result; ``ValueError`` (with the output's tail) when it printed none."""
    tokens = re.search(r"Evaluated ([\d,]+) tokens", output)
    score = re.search(r"Loss \(base 2\): ([-\w.]+), Perplexity: ([-\w.]+)", output)
    if not (tokens and score):
        raise ValueError(f"no result in fairseq-eval-lm output:\n{output[-3000:]}")
    return EvalLm(int(tokens.group(1).replace(",", "")), float(score.group(1)), float(score.group(2)))


# --- summaries ------------------------------------------------------------------------------------------

def mean_std(values: Iterable[Optional[float]]) -> Tuple[Optional[float], Optional[float]]:
    """Mean and sample standard deviation (``n - 1``) of the finite values; ``None`` where undefined."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
