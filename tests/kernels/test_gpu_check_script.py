"""``bash benchmarks/gpu_check.sh`` in its CPU mode: every section that can run without CUDA runs under
Triton's interpreter at tiny sizes and passes, the GPU-only ones are marked skipped, and the JSON and
Markdown reports are written. (On a GPU the same script measures; see its --help.)"""

import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("triton")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.e2e
@pytest.mark.slow
def test_gpu_check_script_runs_its_cpu_sections_and_writes_both_reports(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the script decides
    # the CPU mode even on a GPU machine; this interpreter (of whichever environment runs the suite)
    env.update(OUT=str(tmp_path / "gpu_check"), CUDA_VISIBLE_DEVICES="", PYTHON=sys.executable)
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    sections = data["sections"]
    assert data["mode"].startswith("cpu")
    for name in ("environment", "correctness", "guard_memory", "end_to_end"):
        assert sections[name]["status"] == "ok", (name, sections[name])
        assert sections[name]["results"] and all(r["ok"] for r in sections[name]["results"]), name
    for name in ("kernel_speed", "sanitizer"):
        assert sections[name]["status"] == "skipped" and "needs CUDA" in sections[name]["skipped"][0]
    runs = {r["impl"]: r for r in sections["end_to_end"]["results"]}
    assert runs["stock"]["fused_calls"] == 0 and runs["fused"]["fused_calls"] > 0  # the kernel really ran
    assert any("dropout" in r["case"] for r in sections["correctness"]["results"])
    report = (tmp_path / "gpu_check.md").read_text()
    assert "| correctness | ok |" in report and "| kernel_speed | skipped |" in report
    for target in ("SDPA flash at L=2048", "SDPA memory-efficient with a bias at L=2048", "peak attention memory",
                   "_wiki103 URPE vs stock time per update"):  # every GPU target named, honestly unmeasured
        assert re.search(re.escape(target) + r"[^\n]*: not measured", report), target
