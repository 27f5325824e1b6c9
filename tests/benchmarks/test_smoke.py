"""Every benchmark runs end to end in its tiny --smoke mode, so that none can rot; no speed is asserted."""

import json

import pytest

from benchmarks import attention_micro, decode, train_throughput


@pytest.mark.parametrize("benchmark", [train_throughput, attention_micro, decode], ids=lambda m: m.__name__.split(".")[-1])
def test_benchmark_smoke_mode_runs_and_writes_json_with_the_machine(benchmark, tmp_path):
    path = tmp_path / "result.json"
    benchmark.main(["--smoke", "--json", str(path)])
    result = json.loads(path.read_text())
    assert result["machine"]["torch"] and result["machine"]["cpu"]
    assert result["command"].startswith(f"python benchmarks/{benchmark.__name__.split('.')[-1]}.py")
    archs = result["results"] if benchmark is decode else next(iter(result["results"].values()))
    stock = "transformer_lm" if benchmark is not attention_micro else "stock"
    assert {stock, "transformer_lm_rpe", "transformer_lm_urpe"} <= set(archs)
