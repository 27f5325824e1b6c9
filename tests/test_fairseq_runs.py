"""fairseq_runs reads the lines fairseq writes (copied here from real logs) and runs processes."""

import subprocess
import sys

import pytest

from fairseq_urpe.fairseq_runs import (eval_lm_result, json_curve, mean_std, model_params, run, simple_records,
                                       train_inner_losses, valid_losses, valid_results)

SIMPLE = """\
2026-12-01 13:00:16 | INFO | fairseq_cli.train | num. shared model params: 676,352 (num. trained: 676,352)
2026-12-01 13:00:24 | INFO | train_inner | epoch 001:      4 / 17 loss=11.351, ppl=2611.21, wps=4483.8, ups=2.19, wpb=2044.2, bsz=32, num_updates=4, lr=0.002, gnorm=1.174, train_wall=2, wall=8
2026-12-01 13:00:26 | INFO | train_inner | epoch 001:      8 / 17 loss=10.135, ppl=1124.72, wps=4476.5, ups=2.19, wpb=2048, bsz=32, num_updates=8, lr=0.002, gnorm=1.016, train_wall=2, wall=9
2026-12-01 13:00:28 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.027 | ppl 260.78 | wps 13640.8 | wpb 1580.3 | bsz 25 | num_updates 12
"""
JSON = """\
2026-12-01 13:00:24 | INFO | train_inner | {"epoch": 1, "update": 0.235, "loss": "11.351", "num_updates": "4"}
2026-12-01 13:00:28 | INFO | valid | {"epoch": 1, "valid_loss": "8.027", "valid_ppl": "260.78", "valid_num_updates": "12"}
"""
EVAL_LM = """\
2026-12-01 13:01:00 | INFO | fairseq_cli.eval_lm | num. model params: 676,352
2026-12-01 13:01:05 | INFO | fairseq_cli.eval_lm | Evaluated 31,042 tokens in 3.1s (10013.55 tokens/s)
2026-12-01 13:01:05 | INFO | fairseq_cli.eval_lm | Loss (base 2): 6.9640, Perplexity: 124.85
"""


def test_simple_format_train_and_valid_lines():
    assert train_inner_losses(SIMPLE) == {4: "11.351", 8: "10.135"}
    assert simple_records(SIMPLE)[1]["wpb"] == "2048"
    assert valid_losses(SIMPLE) == [8.027]
    assert valid_results(SIMPLE) == [(8.027, 260.78, 12)]
    assert model_params(SIMPLE) == 676352


def test_json_format_curves():
    assert json_curve(JSON, "train_inner", "num_updates", "loss") == [(4, 11.351)]
    assert json_curve(JSON, "valid", "valid_num_updates", "valid_ppl") == [(12, 260.78)]


def test_eval_lm_result_and_its_absence():
    result = eval_lm_result(EVAL_LM)
    assert (result.tokens, result.loss, result.ppl) == (31042, 6.964, 124.85)
    assert model_params(EVAL_LM) == 676352
    with pytest.raises(ValueError, match="no result in fairseq-eval-lm output"):
        eval_lm_result(SIMPLE)


def test_mean_and_sample_std():
    assert mean_std([1.0, 2.0, 4.0]) == pytest.approx((7 / 3, (((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2) ** 0.5))
    assert mean_std([3.0, None, float("inf")]) == (3.0, None)
    assert mean_std([]) == (None, None)


def test_run_captures_or_logs_the_output_and_times_out(tmp_path):
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    result = run([sys.executable, "-c", script])
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    with pytest.raises(AssertionError, match="exit code 3"):
        result.check()
    logged = run([sys.executable, "-c", script], log=tmp_path / "log")
    assert sorted(logged.stdout.split()) == ["err", "out"] and logged.stderr == ""
    assert (tmp_path / "log").read_text().splitlines()[0].startswith(sys.executable)
    assert run([sys.executable, "-c", "print(input()[::-1])"], input="abc\n").check().stdout == "cba\n"
    with pytest.raises(subprocess.TimeoutExpired):
        run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
