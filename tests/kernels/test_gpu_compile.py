"""The kernels compile for Hopper (sm_90: H100/H200), the A100 (sm_80) and the 99 KB class (sm_86/89) on a
machine without a GPU, with the tiles the kernel picks for each, without register spills and within the
architecture's shared memory. With attention dropout and all tables, with key padding (the variant with
the most registers) and without (what a language model trains with). ``scripts/test.sh`` runs this under
both tested tritons, one test per architecture (each its own process, so that pytest-xdist can run them side
by side): every architecture under the triton torch's CUDA build pins (``TESTED_TRITON[0]``, what a GPU
user's install runs), sm_90 alone under the other (each compile costs seconds of CPU).

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
pytestmark = [pytest.mark.every_triton, pytest.mark.slow]  # run again under the second triton (scripts/test.sh)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (capability, head dim, key padding): GPT-2 small's heads and the _wiki103 archs', with attention dropout;
# without padding too (a language model's training batches: another compile, other registers; the forward
# stores the far tiles' share there, and where the tiles say far_dq="dkdv" dK/dV adds the far tiles' dQ).
CONFIGS = [(90, 64, True), (90, 128, True), (80, 64, True), (80, 128, True), (86, 128, True), (90, 64, False),
           (90, 128, False), (80, 64, False), (80, 128, False), (86, 64, False)]
SHARED_MEMORY = {90: 227 * 1024, 80: 163 * 1024, 86: 99 * 1024}  # bytes per block


def compile_in_a_clean_process(cache_dir, configs, deterministic=False):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache_dir)
    kernels = "('dq',)" if deterministic else "('forward', 'dkdv', 'dq')"
    code = (
        "import json, sys; from benchmarks.fused_kernel import compile_kernels; "
        f"kernels = {kernels}; "
        f"print(json.dumps([compile_kernels(c, 'bf16', d, report=False, dropout=True, padding=p, "
        f"deterministic={deterministic}, only=kernels + (() if p or {deterministic} else ('delta',))) "
        f"for c, d, p in {configs!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("capability", sorted({c for c, _, _ in CONFIGS}, reverse=True), ids=lambda c: f"sm_{c}")
def test_kernels_compile_without_register_spills(capability, tmp_path):
    import triton

    from fairseq_urpe.kernels.dispatch import TESTED_TRITON

    if capability != 90 and triton.__version__ != TESTED_TRITON[0]:
        pytest.skip(f"sm_{capability} is compiled under triton {TESTED_TRITON[0]}, the one torch's CUDA build pins")
    configs = [config for config in CONFIGS if config[0] == capability]
    for (_, head_dim, padding), results in zip(configs, compile_in_a_clean_process(tmp_path, configs)):
        # without padding the delta kernel adds the far tiles' table gradients (the far share): compiled too
        assert set(results) == {"forward", "dkdv", "dq"} | (set() if padding else {"delta"})
        for name, usage in results.items():
            config = (f"sm_{capability} {name}, head dim {head_dim}, dropout{', padding' if padding else ''}, "
                      f"triton {triton.__version__}")
            assert usage["shared_bytes"] <= SHARED_MEMORY[capability], config
            assert usage["spill_bytes"] == 0, f"{config} spills registers with the default tiles"
            # nvdisasm's SASS: the same loops over tiles by their back edges as the PTX has
            assert usage["sass"] is not None and len(usage["sass"]["loops"]) == len(usage["loops"]), config
            if capability == 90 and name != "delta":  # (delta has no matrix product)
                assert usage["wgmma"] > 0 and usage["mma_sync"] == 0, config  # Hopper's tensor-core instructions
    assert any(tmp_path.iterdir()), "nothing was compiled into the private cache"


def test_the_deterministic_backward_compiles_without_atomics_or_spills(tmp_path):
    """The dQ kernel of the deterministic backward (the only kernel it changes: table gradients as partial
    rows, no far share, no far dQ from dK/dV) on sm_90 at head dims 64 and 128, with dropout, with and
    without padding: no spill, and not one atomic instruction in its SASS (nvdisasm), which is what makes
    its runs agree bit for bit."""
    import triton

    configs = [(90, 64, True), (90, 64, False), (90, 128, True)]
    for (_, head_dim, padding), results in zip(configs, compile_in_a_clean_process(tmp_path, configs, True)):
        usage = results["dq"]
        config = f"sm_90 deterministic dq, head dim {head_dim}, padding {padding}, triton {triton.__version__}"
        assert usage["spill_bytes"] == 0, config
        assert usage["sass"]["atomics"] == 0 and not usage["atomics"], config
        assert usage["sass"]["instructions"] > 0 and usage["wgmma"] > 0, config


def test_the_one_pass_backward_compiles_without_spills_at_head_dim_64(tmp_path):
    """The one-pass backward's dK/dV kernel on sm_90 with ``tiles.ONE_PASS_BLOCKS`` at head dim 64, without and
    with padding and dropout: no spill, every product on Hopper's wgmma. (At 128 its tile spills 16-52 bytes:
    docs/performance.md.)"""
    import triton

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    code = ("import json; from benchmarks.fused_kernel import compile_kernels; "
            "from fairseq_urpe.kernels.tiles import ONE_PASS_BLOCKS; "
            "print(json.dumps([compile_kernels(90, 'bf16', 64, ONE_PASS_BLOCKS[64], report=False, dropout=p, "
            "padding=p, only=('dkdv',), one_pass=True)['dkdv'] for p in (False, True)]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    for padded, usage in zip((False, True), json.loads(done.stdout.strip().splitlines()[-1])):
        config = f"sm_90 one-pass dkdv, head dim 64, padding and dropout {padded}, triton {triton.__version__}"
        assert usage["one_pass"] and usage["spill_bytes"] == 0, config
        assert usage["wgmma"] > 0 and usage["mma_sync"] == 0, config
        assert usage["sass"]["atomics"] > 0, config  # dQ and the tables' sums

