"""Running fairseq's command-line tools and reading what they log: the one copy that the demo, the
experiments, the examples and the end-to-end tests share.

    run(cmd, log=path)          a process with its output captured (and written to ``log``), timed
    fairseq_command("train")    ``fairseq-train`` of the running interpreter's environment
    json_records, simple_records the ``| train_inner |`` / ``| valid |`` lines, JSON or simple log format
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
import tempfile
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
    stdout: str  # with ``log``: stdout and stderr, interleaved as the process wrote them
    stderr: str
    seconds: float  # wall time
    cpu_seconds: float  # user + system time of the process (and the children it waited for)

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def tail(self, chars: int = 4000) -> str:
        return self.output[-chars:]

    def check(self) -> "Run":
        if self.returncode != 0:
            raise AssertionError(f"command failed with exit code {self.returncode}:\n  {' '.join(self.cmd)}\n"
                                 f"--- last output ---\n{self.tail()}")
        return self


def run(cmd: Sequence, log: Optional[Union[str, Path]] = None, env: Optional[Dict[str, str]] = None,
        cwd=None, input: Optional[str] = None, timeout: Optional[float] = None) -> Run:
    """Run ``cmd`` to the end (killed after ``timeout`` seconds: ``subprocess.TimeoutExpired``). Without
    ``log`` its stdout and stderr are captured apart; with it both go, interleaved, to that file after
    the command line, and come back as ``stdout``."""
    cmd = [str(c) for c in cmd]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        if log is not None:
            out = open(log, "w+")
            out.write(" ".join(cmd) + "\n")
            out.flush()
        start = time.time()
        process = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                   stdout=out, stderr=subprocess.STDOUT if log is not None else err, text=True,
                                   env=env if env is not None else fairseq_env(), cwd=cwd)
        if input is not None:
            process.stdin.write(input)
            process.stdin.close()
        while True:  # os.wait4, not Popen.wait: it also gives the process's own CPU time
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if timeout is not None and time.time() - start > timeout:
                process.kill()
                os.wait4(process.pid, 0)
                process.returncode = -9
                raise subprocess.TimeoutExpired(cmd, timeout)
            time.sleep(0.02)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.time() - start
        out.seek(0)
        stdout, stderr = out.read(), ("" if log is not None else (err.seek(0), err.read())[1])
        if log is not None:
            out.close()
            stdout = stdout.split("\n", 1)[1]  # without the command line written first
    return Run(cmd, process.returncode, stdout, stderr, seconds, usage.ru_utime + usage.ru_stime)


# --- fairseq-train logs ---------------------------------------------------------------------------------

def json_records(log: str, tag: str) -> List[dict]:
    """The JSON records of ``| <tag> | {...}`` lines (``--log-format json``), e.g. tag ``train_inner`` or ``valid``."""
    marker = f"| {tag} |"
    return [json.loads(line[line.index("{"):]) for line in log.splitlines() if marker in line and "{" in line]


def json_curve(log: str, tag: str, x: str, y: str) -> List[Tuple[int, float]]:
    """``[(record[x], record[y])]`` of the ``tag`` records that hold both, e.g. ``("valid", "valid_num_updates", "valid_ppl")``."""
    return [(int(r[x]), float(r[y])) for r in json_records(log, tag) if x in r and y in r]


def simple_records(log: str, tag: str = "train_inner") -> List[Dict[str, str]]:
    """``{field: value as logged}`` of each simple-format ``| <tag> | ... loss=5.1, ppl=34.2, ...`` line."""
    marker = f"| {tag} |"
    return [dict(re.findall(r"(\w+)=([-\w.]+)", line)) for line in log.splitlines() if marker in line]


def train_inner_losses(log: str) -> Dict[int, str]:
    """``{num_updates: loss}`` of the simple-format train_inner lines (the loss kept as the logged string)."""
    return {int(r["num_updates"]): r["loss"] for r in simple_records(log) if "loss" in r and "num_updates" in r}


def valid_results(log: str, subset: str = "valid") -> List[Tuple[float, float, int]]:
    """``[(loss base 2, ppl, num_updates)]`` of every simple-format validation of ``subset``, in order."""
    pattern = rf"\| valid on '{subset}' subset \| loss ([-\w.]+) \| ppl ([-\w.]+) \|.*?\| num_updates (\d+)"
    return [(float(loss), float(ppl), int(n)) for loss, ppl, n in re.findall(pattern, log)]


def valid_losses(log: str, subset: str = "valid") -> List[float]:
    """Base-2 losses of every validation fairseq-train logged (any log format but JSON), in order."""
    return [float(x) for x in re.findall(rf"valid on '{subset}' subset \| loss ([-\w.]+) \|", log)]


def model_params(log: str) -> Optional[int]:
    """fairseq's count of the model's parameters, the last that ``log`` holds (fairseq-train's ``num. shared
    model params``, fairseq-eval-lm's ``num. model params``: shared parameters once); ``None`` if none."""
    found = re.findall(r"num\. (?:shared )?model params: ([\d,]+)", log)
    return int(found[-1].replace(",", "")) if found else None


# --- fairseq-eval-lm ------------------------------------------------------------------------------------

@dataclass
class EvalLm:
    tokens: int
    loss: float  # base 2
    ppl: float


def evaluated_tokens(output: str) -> Optional[int]:
    """The last ``Evaluated N tokens`` of fairseq-eval-lm's output; ``None`` if none."""
    found = re.findall(r"Evaluated ([\d,]+) tokens", output)
    return int(found[-1].replace(",", "")) if found else None


def eval_lm_result(output: str) -> EvalLm:
    """fairseq-eval-lm's (last) result; ``ValueError`` (with the output's tail) when it printed none."""
    tokens = evaluated_tokens(output)
    score = re.findall(r"Loss \(base 2\): ([-\w.]+), Perplexity: ([-\w.]+)", output)
    if tokens is None or not score:
        raise ValueError(f"no result in fairseq-eval-lm output:\n{output[-3000:]}")
    return EvalLm(tokens, float(score[-1][0]), float(score[-1][1]))


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
