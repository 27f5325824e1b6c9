"""The measured dispatch table: gpu_check's paths section writes the fastest path that passed per
configuration, and ``--urpe-attention-impl auto`` reads it. On CPU, with a stub check and a stub timer:
no speed is measured or asserted here."""

import json
import logging

import pytest
import torch

from benchmarks.gpu_check.paths import check_path, choose_paths, configurations, dense_attention, ratio_table
from fairseq_urpe.kernels import dispatch, dispatch_table
from fairseq_urpe.kernels.dispatch_table import TableKey, read_table, table_kind, write_table
from tests.reference import causal_mask

# stub measurements: per path, milliseconds by kind
STUB_MS = {"sdpa_flash": 1.0, "fused": {"bias": 1.2, "urpe": 2.0, "urpe_tail": 1.3, "none": 1.1},
           "flex": {"bias": 1.1, "urpe": 2.4, "urpe_tail": 1.5, "none": 1.05}, "dense": {"bias": 5.0, "urpe": 6.0,
                                                                                    "urpe_tail": 6.0, "none": 4.0}}


def stub_check(path, config):
    # the fused kernel fails its float64 check on head dim 128 (so the table must not choose it there)
    return {"ok": not (path == "fused" and config["head_dim"] == 128)}


def stub_time(path, config):
    ms = STUB_MS[path] if path == "sdpa_flash" else STUB_MS[path][config["kind"]]
    return {"ms": ms * (2 if config["dropout"] else 1), "peak_mib": None}


@pytest.fixture
def table_file(tmp_path, monkeypatch):
    path = tmp_path / "dispatch_table.json"
    monkeypatch.setenv(dispatch_table.ENVIRONMENT, str(path))
    return path


def test_the_table_holds_the_fastest_path_that_passed_per_configuration(table_file):
    results = choose_paths(configurations(), stub_check, stub_time, "NVIDIA Stub GPU")
    assert len(results) == 16  # 2 points x 2 dropout x 4 kinds
    write_table(str(table_file), results, "test")
    choices = read_table(str(table_file))
    assert len(choices) == 16
    d64, d128 = ("bfloat16", 64), ("float16", 128)
    assert choices[TableKey("NVIDIA Stub GPU", *d64, "bias", False)] == "flex"  # 1.1 < 1.2
    assert choices[TableKey("NVIDIA Stub GPU", *d64, "urpe", False)] == "fused"  # 2.0 < 2.4
    assert choices[TableKey("NVIDIA Stub GPU", *d64, "urpe_tail", False)] == "fused"
    assert choices[TableKey("NVIDIA Stub GPU", *d64, "bias", True)] == "fused"  # flex has no dropout
    assert choices[TableKey("NVIDIA Stub GPU", *d128, "urpe", False)] == "flex"  # fused failed its check
    assert choices[TableKey("NVIDIA Stub GPU", *d128, "bias", True)] == "dense"  # fused failed, flex no dropout
    entry = next(e for e in json.loads(table_file.read_text())["entries"]
                 if (e["dtype"], e["kind"], e["dropout"]) == ("bfloat16", "bias", False))
    assert entry["passed"] == ["dense", "flex", "fused"] and entry["ms"] == {"dense": 5.0, "flex": 1.1, "fused": 1.2}
    printed = ratio_table(results)
    assert "| 2048 | 64 | bfloat16 | bias | no | 1.20x | 1.10x | 5.00x | flex |" in printed
    assert "| 3072 | 128 | float16 | bias | yes | FAILED | - | 5.00x | dense |" in printed


def test_a_configuration_where_nothing_passed_is_left_out(table_file):
    results = choose_paths(configurations()[:1], lambda path, config: {"ok": False}, stub_time, "GPU")
    assert write_table(str(table_file), results, "test")["entries"] == []
    assert read_table(str(table_file)) == {}


def test_a_later_run_replaces_the_configurations_it_measured_and_keeps_the_rest(table_file):
    write_table(str(table_file), choose_paths(configurations(), stub_check, stub_time, "GPU"), "first")
    first = read_table(str(table_file))
    faster_dense = lambda path, config: {"ms": 0.5 if path == "dense" else 1.0}  # noqa: E731
    write_table(str(table_file), choose_paths(configurations()[:2], stub_check, faster_dense, "GPU"), "second")
    second = read_table(str(table_file))
    assert set(second) == set(first)
    changed = {key for key in first if first[key] != second[key]}
    assert changed == {TableKey("GPU", "bfloat16", 64, kind, False) for kind in ("urpe_tail", "bias")}
    assert all(second[key] == "dense" for key in changed)
    # a configuration measured again where nothing passes loses its entry
    write_table(str(table_file), choose_paths(configurations()[:1], lambda p, c: {"ok": False}, stub_time, "GPU"), "t")
    assert TableKey("GPU", "bfloat16", 64, "urpe_tail", False) not in read_table(str(table_file))


def decide(impl="auto", tables=(None, None), dropout=0.0):
    q = torch.zeros(2, 3, 6, 4)
    return dispatch.attention_backend(impl, q, causal_mask(6, torch.float32), False, False, dropout, True, tables)


def test_auto_runs_the_path_the_table_names_and_keeps_its_order_without_an_entry(table_file, caplog,
                                                                                  monkeypatch):
    monkeypatch.setattr(dispatch, "_LOGGED", set())  # each line is logged once a process
    assert decide() is None  # no table: today's order (dense on CPU)
    cpu = dict(device="cpu", dtype="float32", head_dim=4, dropout=False, passed=["dense", "flex"])
    results = [dict(cpu, kind="none", ms={"dense": 2.0, "flex": 1.0}),
               dict(cpu, kind="bias", ms={"dense": 1.0, "flex": 2.0})]
    write_table(str(table_file), results, "test")
    with caplog.at_level(logging.INFO, logger=dispatch.logger.name), torch.no_grad():
        assert isinstance(decide(), dispatch.FlexBackend)  # kind "none": flex measured fastest
        assert decide(tables=(torch.zeros(3, 6), None)) is None  # kind "bias": dense measured fastest
        assert decide(tables=(torch.zeros(3, 6), torch.ones(3, 6))) is None  # "urpe": no entry, today's order
    assert "attention path: flex (the dispatch table measured flex fastest for cpu, float32, head dim 4, none" in caplog.text
    assert "attention path: dense (the dispatch table measured dense fastest for cpu, float32, head dim 4, bias" in caplog.text


def test_auto_falls_back_to_its_order_where_the_named_path_cannot_run_the_call(table_file, caplog, monkeypatch):
    monkeypatch.setattr(dispatch, "_LOGGED", set())  # each line is logged once a process
    write_table(str(table_file), [dict(device="cpu", dtype="float32", head_dim=4, dropout=False, kind="none",
                                       passed=["flex"], ms={"flex": 1.0})], "test")
    with caplog.at_level(logging.INFO, logger=dispatch.logger.name):
        q = torch.zeros(2, 3, 6, 4, requires_grad=True)  # a backward on CPU: flex cannot
        assert dispatch.attention_backend("auto", q, causal_mask(6, torch.float32), False, False, 0.0) is None
    assert "the dispatch table names flex for cpu, float32, head dim 4, none" in caplog.text
    assert "training on CPU" in caplog.text


def test_a_file_that_is_not_a_table_is_refused_naming_it(table_file):
    table_file.write_text(json.dumps({"format": 1, "entries": [{"path": "warp"}]}))
    with pytest.raises(ValueError, match=f"the attention dispatch table {table_file} is not one gpu_check.sh writes"):
        decide()


def test_table_kinds():
    assert table_kind(None, None, 10) == "none"
    assert table_kind(torch.zeros(2, 10), None, 10) == "bias"
    assert table_kind(None, torch.ones(2, 10), 10) == "urpe"  # c over every distance
    assert table_kind(torch.zeros(2, 10), torch.ones(2, 4), 10) == "urpe_tail"  # constant from distance 3


def test_the_float64_check_passes_the_dense_path_and_fails_a_path_that_drops_c():
    length = 150  # past the tables' constant tail (MODEL_FAR)
    passed = check_path(dense_attention, "urpe_tail", torch.float32, 8, "cpu", length=length)
    assert passed["ok"] and passed["worst"] < 1e-5
    failed = check_path(lambda q, k, v, b, c, p: dense_attention(q, k, v, b, None, p), "urpe_tail", torch.float32,
                        8, "cpu", length=length)
    assert not failed["ok"] and failed["errors"]["output"] > 1e-2
