"""Every benchmark runs end to end in its tiny --smoke mode, so that none can rot; no speed is asserted."""

import json

import pytest

from benchmarks import attention_micro, decode, dense_memory, train_throughput
from benchmarks.common import base_size_archs


# Stock, RPE, URPE and a dot-product-free kind: every attention code path, in seconds. The full runs
# take every base-size arch registered at run time (27 now: stock and the 26 variants).
ARCHS = ["transformer_lm", "transformer_lm_rpe", "transformer_lm_urpe", "transformer_lm_urpe_alibi_dpf"]


def test_base_size_archs_are_found_at_run_time():
    archs = base_size_archs()
    assert archs[:3] == ["transformer_lm", "transformer_lm_rpe", "transformer_lm_urpe"]
    assert "transformer_lm_urpe_alibi_dpf" in archs  # a kind registered by the plugin, found by its sizes
    assert not any(a.endswith(("_tiny", "_wiki103", "_gpt2_small")) for a in archs)


@pytest.mark.parametrize("benchmark", [train_throughput, attention_micro, decode, dense_memory], ids=lambda m: m.__name__.split(".")[-1])
def test_benchmark_smoke_mode_runs_and_writes_json_with_the_machine(benchmark, tmp_path):
    path = tmp_path / "result.json"
    benchmark.main(["--smoke", "--json", str(path), "--archs", *ARCHS])
    result = json.loads(path.read_text())
    assert result["machine"]["torch"] and result["machine"]["cpu"]
    assert result["command"].startswith(f"python -m {benchmark.__name__} --smoke")
    archs = result["results"] if benchmark is decode else next(iter(result["results"].values()))
    stock = "transformer_lm" if benchmark is not attention_micro else "stock"
    assert {stock, *ARCHS[1:]} <= set(archs)
