"""Every benchmark runs end to end in its tiny --smoke mode, so that none can rot; no speed is asserted."""

import json
import math
import statistics

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


def test_decoding_with_turns_at_every_step_times_every_step_of_every_model(tmp_path):
    path = tmp_path / "result.json"
    decode.main(["--smoke", "--interleave", "step", "--json", str(path), "--archs", *ARCHS[:3]])
    results = json.loads(path.read_text())["results"]
    for arch in ARCHS[1:3]:
        rounds = results[arch]["cpu"]["generate_vs_stock_rounds"]
        assert len(rounds["ratios"]) == 1 and rounds["low"] is None  # --smoke: one round, no interval
        assert rounds["geometric_mean"] == rounds["ratios"][0] > 0


def test_the_ratio_interval_is_a_t_interval_of_the_log_ratios():
    got = decode.ratio_interval([0.9, 1.0, 0.8, 0.95], [1.0, 1.0, 1.0, 1.0])
    logs = [math.log(r) for r in (0.9, 1.0, 0.8, 0.95)]
    mean = sum(logs) / 4
    half = 3.182446305284263 * statistics.stdev(logs) / 2  # t(0.975, 3) x s / sqrt(4)
    assert math.isclose(got["geometric_mean"], math.exp(mean), rel_tol=1e-12)
    assert math.isclose(got["low"], math.exp(mean - half), rel_tol=1e-9)
    assert math.isclose(got["high"], math.exp(mean + half), rel_tol=1e-9)
    from scipy.stats import t

    statistic = (mean - math.log(0.95)) / (statistics.stdev(logs) / 2)
    assert math.isclose(got["p_vs_0.95"], 2 * t.sf(abs(statistic), 3), rel_tol=1e-9)
