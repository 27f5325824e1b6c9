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
    repeats = [r for r in sections["correctness"]["results"] if "two runs bit for bit" in r["case"]]
    assert repeats and all(r["ok"] and r["differing"]["deterministic"] == [] for r in repeats), repeats
    report = (tmp_path / "gpu_check.md").read_text()
    assert "| correctness | ok |" in report and "| kernel_speed | skipped |" in report
    for target in ("SDPA flash at L=2048", "SDPA memory-efficient with a bias at L=2048", "peak attention memory",
                   "_wiki103 URPE vs stock time per update"):  # every GPU target named, honestly unmeasured
        assert re.search(re.escape(target) + r"[^\n]*: not measured", report), target


def test_the_report_judges_the_speed_targets_on_the_default_tables_beside_the_prediction():
    """The targets are about transformer_lm_urpe's default tables (far tiles), as the performance model
    predicts them: the report compares those cases with SDPA flash; the full-length tables (no far tiles)
    are reported beside, without a target."""
    from benchmarks.gpu_check.prediction import predict
    from benchmarks.gpu_check.report import targets

    times = {"sdpa_flash_no_bias": 1.0, "fused_urpe_lm_tables": 1.2, "fused_urpe_lm_tables_dropout_0.1": 1.7,
             "fused_urpe_bias_and_c": 2.0, "fused_urpe_dropout_0.1": 2.5, "sdpa_efficient_with_bias": 4.0}
    results = [{"case": f"L=2048 {name}", "ok": True, "forward_backward_ms": ms} for name, ms in times.items()]
    lines = targets({"kernel_speed": {"results": results}})
    predicted = predict()
    within_13 = next(line for line in lines if "within 1.3x" in line)
    within_16 = next(line for line in lines if "within 1.6x" in line)
    assert "default tables" in within_13 and "measured 1.20x (met)" in within_13
    low, high = predicted["no dropout range"]
    assert f"predicted {low:.2f}-{high:.2f}x" in within_13
    assert "default tables" in within_16 and "measured 1.70x (NOT met)" in within_16
    low, high = predicted["dropout range"]
    assert f"predicted {low:.2f}-{high:.2f}x" in within_16
    assert any("full-length tables (no far tiles), without dropout, at L=2048: 2.00x" in line for line in lines)
    assert any("full-length tables (no far tiles), with dropout, at L=2048: 2.50x" in line for line in lines)
    assert any("memory-efficient with a bias at L=2048: measured 0.50x its time (met)" in line for line in lines)


def test_the_performance_doc_and_the_readme_quote_the_prediction_as_it_prints():
    """docs/performance.md holds the tables ``python -m benchmarks.gpu_check.prediction`` prints from the
    committed compile report, verbatim; the README and the doc's targets quote its ranges (never a bare
    point) at both points, for both kinds of tables."""
    from benchmarks.gpu_check.prediction import load_results, one_pass_table, per_score_table, predict, predict_one_pass, table

    prediction = predict()
    printed = table(prediction, load_results())
    doc = open(os.path.join(REPO, "docs", "performance.md")).read()
    assert printed in doc and per_score_table(load_results()) in doc
    one_pass_doc = open(os.path.join(REPO, "docs", "performance", "one_pass_backward.md")).read()
    assert one_pass_table(predict_one_pass(), prediction) in one_pass_doc  # beside the split backward
    single = predict_one_pass()["L2048 d64 bf16"]
    for kind in ("t5", "alibi"):
        low, high = single[kind]["no dropout"]["range"]
        assert f"{low:.2f}-{high:.2f}x" in " ".join(doc.split()), kind
    readme = " ".join(open(os.path.join(REPO, "README.md")).read().split())
    for point in ("L2048 d64 bf16", "L3072 d128 fp16"):
        for kind in ("t5", "alibi"):
            for case in ("no dropout", "dropout / flash without"):
                low, high = prediction[point][kind][case]["range"]
                assert f"**{low:.2f}-{high:.2f}x**" in readme, (point, kind, case)
    low, high = prediction["no dropout range"]
    assert f"predicted {low:.2f}-{high:.2f}x" in " ".join(doc.split())
    low, high = prediction["dropout range"]
    assert f"predicted {low:.2f}-{high:.2f}x" in " ".join(doc.split())
