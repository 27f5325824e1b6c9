"""fairseq's command-line tools run in processes forked from one that has already imported them.

A fresh ``fairseq-train`` spends 3.5-5 CPU-seconds importing fairseq (torch, fairseq's tasks and models,
scikit-learn through one of its criterions) before it reads its arguments. A *parent* process per tool
imports the tool's console-script module once (``fairseq_cli.train`` for ``fairseq-train``, as the
installed entry point names it), then forks one child per command. A child is the state a fresh
``fairseq-<tool>`` process reaches after that import (the module's own logging setup included), and runs
the entry point's function with the command's arguments, working directory and standard streams: the same
code as the console script, without the second import.

    tools = ForkedTools(env)            env: the environment every command gets; its parents start with it
    tools.run("train", args, cwd=...)   -> fairseq_runs.Run, like fairseq_runs.run(fairseq_command("train") + args)
    tools.close()

A command whose environment differs from ``env`` runs as a process of its own (``fairseq_runs.run``): a
parent's imports have read its environment already. Parents run this file; they import the tool's module
only (not the plugin, which each command's ``--user-dir`` imports, as in a fresh process).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Optional, Sequence


class ForkedTools:
    def __init__(self, env: Dict[str, str]):
        self.env = dict(env)
        self._dir = tempfile.mkdtemp(prefix="fairseq-forks-")
        self._parents: Dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()

    def _socket(self, tool: str) -> str:
        """The socket of ``tool``'s parent, started at the first command of that tool."""
        from fairseq_urpe.fairseq_runs import fairseq_command

        path = os.path.join(self._dir, tool)
        with self._lock:
            if tool not in self._parents:
                script = fairseq_command(tool)[0]
                ready = os.path.join(self._dir, f"{tool}.ready")
                self._parents[tool] = subprocess.Popen(
                    [sys.executable, __file__, tool, script, path, ready], env=self.env,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(path + ".log", "w"))
                while not os.path.exists(ready):  # the parent imports, then listens, then writes `ready`
                    if self._parents[tool].poll() is not None:
                        raise RuntimeError(f"the parent of fairseq-{tool} exited:\n{Path(path + '.log').read_text()[-3000:]}")
                    time.sleep(0.05)
        return path

    def run(self, tool: str, args: Sequence, env: Optional[Dict[str, str]] = None, cwd=None,
            input: Optional[str] = None, timeout: Optional[float] = None) -> Run:
        """``fairseq-<tool> args`` to its end (killed after ``timeout`` seconds: ``subprocess.TimeoutExpired``)."""
        from fairseq_urpe.fairseq_runs import Run, fairseq_command, run

        cmd = fairseq_command(tool) + [str(a) for a in args]
        if env is not None and env != self.env or len(fairseq_command(tool)) != 1:
            return run(cmd, env=env, cwd=cwd, input=input, timeout=timeout)
        with tempfile.TemporaryDirectory(dir=self._dir) as streams:
            paths = {name: os.path.join(streams, name) for name in ("stdin", "stdout", "stderr")}
            Path(paths["stdin"]).write_text(input or "")
            request = dict(argv=cmd, cwd=str(cwd or os.getcwd()), **paths)
            start = time.time()
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(self._socket(tool))
                conn.sendall((json.dumps(request) + "\n").encode())
                replies = conn.makefile("r")
                pid = json.loads(replies.readline())["pid"]
                conn.settimeout(None if timeout is None else max(0.0, timeout - (time.time() - start)))
                try:
                    done = json.loads(replies.readline())
                except socket.timeout:
                    os.kill(pid, 9)
                    raise subprocess.TimeoutExpired(cmd, timeout)
            seconds = time.time() - start
            stdout, stderr = (Path(paths[name]).read_text(errors="replace") for name in ("stdout", "stderr"))
        return Run(cmd, done["returncode"], stdout, stderr, seconds, done["cpu_seconds"])

    def close(self) -> None:
        for parent in self._parents.values():
            parent.terminate()
            parent.wait()
        self._parents.clear()
        shutil.rmtree(self._dir, ignore_errors=True)


# --- the parent: run as ``python forked_tools.py TOOL SCRIPT SOCKET READY`` ------------------------------

def _child(request: dict, main) -> None:
    """In the fork: become ``fairseq-<tool> argv`` with the request's directory and streams, then exit."""
    import atexit
    import traceback

    code = 1
    try:
        os.chdir(request["cwd"])
        written = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        for fd, name, mode in ((0, "stdin", os.O_RDONLY), (1, "stdout", written), (2, "stderr", written)):
            opened = os.open(request[name], mode, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(sys.argv[0])  # a console script's first path entry is its folder
        try:
            result = main()
            code = result if isinstance(result, int) else (0 if result is None else 1)
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
        except BaseException:  # as the interpreter would: the traceback, exit status 1
            traceback.print_exc()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _serve(tool: str, script: str, path: str, ready: str) -> None:
    import selectors
    from importlib.metadata import entry_points

    sys.path[0] = os.path.dirname(script)  # as the console script's, not this file's folder
    (entry,) = [e for e in entry_points(group="console_scripts") if e.name == f"fairseq-{tool}"]
    main = entry.load()  # imports the tool's module, as the console script's first line does
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    Path(ready).touch()
    children: Dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    while True:
        for _ in selector.select(timeout=0.02):
            conn, _ = server.accept()
            request = json.loads(conn.makefile("r").readline())
            pid = os.fork()
            if pid == 0:
                selector.close()
                server.close()
                conn.close()
                _child(request, main)
            conn.sendall((json.dumps({"pid": pid}) + "\n").encode())
            children[pid] = conn
        while children:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if not pid:
                break
            conn = children.pop(pid)
            try:
                conn.sendall((json.dumps({"returncode": os.waitstatus_to_exitcode(status),
                                          "cpu_seconds": usage.ru_utime + usage.ru_stime}) + "\n").encode())
            except OSError:
                pass  # the caller has gone (it timed out, or its test failed)
            conn.close()


if __name__ == "__main__":
    _serve(*sys.argv[1:5])
