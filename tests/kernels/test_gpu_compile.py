"""The kernels compile for a Hopper GPU (sm_90, the H100/H200 class) on a machine without one.

The interpreter runs the kernels' arithmetic but not Triton's compiler, which rejects things the
interpreter accepts (a plain Python global in a kernel, say). Triton's wheel bundles ptxas, so the
whole path to a cubin runs on CPU.
"""

import pytest

pytest.importorskip("triton")


def test_forward_and_backward_kernels_compile_for_sm90_without_register_spills(monkeypatch):
    from benchmarks.fused_kernel import compile_kernels

    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the kernels are decorated afresh when the file is loaded
    results = compile_kernels(90, "bf16", 64, report=False)
    assert set(results) == {"forward", "dkdv", "dq"}
    for name, usage in results.items():
        assert usage["shared_bytes"] <= 227 * 1024, name  # Hopper's shared memory per block
        assert usage["spill_bytes"] in (0, None), f"{name} spills registers with the default tiles"
