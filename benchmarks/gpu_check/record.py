"""The JSON record every section writes through after each case, and the helpers that run cases."""

import json
import os
import time

import torch

SECTIONS = ("environment", "correctness", "guard_memory", "kernel_speed", "paths", "end_to_end", "sanitizer")
GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"


class Record:
    """One section's entry of the JSON file: status, seconds, results; written through at every change."""

    def __init__(self, path: str, section: str, budget_s: float):
        self.path, self.section, self.budget_s = path, section, budget_s
        self.start = time.time()
        self.entry = {"status": "running", "seconds": 0.0, "budget_s": budget_s, "results": [], "skipped": []}
        self.write()

    def out_of_time(self) -> bool:
        return time.time() - self.start > self.budget_s

    def add(self, result: dict) -> None:
        self.entry["results"].append(result)
        self.write()

    def skip(self, case: str, why: str) -> None:
        self.entry["skipped"].append(f"{case}: {why}")
        self.write()

    def finish(self, status: str, error: str = None) -> None:
        self.entry["status"] = status
        if error:
            self.entry["error"] = error
        self.write()

    def write(self) -> None:
        self.entry["seconds"] = round(time.time() - self.start, 1)
        data = load_json(self.path)
        data.setdefault("sections", {})[self.section] = self.entry
        data["mode"] = "gpu" if GPU else "cpu (Triton interpreter, tiny sizes)"
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, default=str)
        os.replace(tmp, self.path)


def load_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def cases(record: Record, items):
    """The items, until the section's time budget is spent; the rest are recorded as skipped."""
    items = list(items)
    for i, item in enumerate(items):
        if record.out_of_time():
            for rest in items[i:]:
                record.skip(str(rest), "section time budget spent")
            return
        yield item


def run_case(record: Record, name: str, fn) -> None:
    """``record.add(fn())`` with the case's name; an exception becomes a failed case, not a failed section."""
    start = time.time()
    try:
        result = fn()
        result = {"case": name, "ok": result.pop("ok", True), **result}
    except Exception as error:  # one case: compile error, out of memory, ...
        result = {"case": name, "ok": False, "error": f"{type(error).__name__}: {' '.join(str(error).split())[:400]}"}
        if GPU:
            torch.cuda.empty_cache()
    result["seconds"] = round(time.time() - start, 2)
    print(f"[{record.section}] {name}: {'ok' if result['ok'] else 'FAILED'} {short(result)}", flush=True)
    record.add(result)


def short(result: dict) -> str:
    return " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items()
                    if k not in ("case", "ok") and not isinstance(v, (dict, list)))[:300]
