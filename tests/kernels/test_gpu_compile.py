"""The kernels compile for a Hopper GPU (sm_90, the H100/H200 class) on a machine without one.

The interpreter runs the kernels' arithmetic but not Triton's compiler, which rejects things the
interpreter accepts (a plain Python global in a kernel, say). Triton's wheel bundles ptxas, so the
whole path to a cubin runs on CPU.

The compile runs in a process of its own. This one imported triton under ``TRITON_INTERPRET=1``
(conftest.py), which decorates triton's own library (``tl.minimum``, ``tl.sum``, ...) as interpreted
functions for the life of the process, and the interpreter leaves ``triton.language.core`` patched
after a run: a compile here would fail on a cold cache ("'value' object has no attribute 'dtype'")
and pass only on a cache that a clean process had filled. The empty private cache makes the compile
run every time.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (head dim, attention dropout): GPT-2 small's heads, and the _wiki103 archs' heads with their dropout.
CONFIGS = [(64, False), (128, True)]


def compile_in_a_clean_process(cache_dir, configs):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache_dir)
    code = (
        "import json, sys; from benchmarks.fused_kernel import compile_kernels; "
        f"print(json.dumps([compile_kernels(90, 'bf16', d, report=False, dropout=p) for d, p in {configs!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_kernels_compile_for_sm90_without_register_spills(tmp_path):
    for (head_dim, dropout), results in zip(CONFIGS, compile_in_a_clean_process(tmp_path, CONFIGS)):
        assert set(results) == {"forward", "dkdv", "dq"}
        for name, usage in results.items():
            config = f"{name}, head dim {head_dim}{', dropout' if dropout else ''}"
            assert usage["shared_bytes"] <= 227 * 1024, config  # Hopper's shared memory per block
            assert usage["spill_bytes"] in (0, None), f"{config} spills registers with the default tiles"
    assert any(tmp_path.iterdir()), "nothing was compiled into the private cache"
