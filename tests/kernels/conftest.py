"""The kernel tests run Triton's interpreter on CPU (numpy): no GPU needed, slow, so shapes stay small.

Triton reads TRITON_INTERPRET when a function is decorated: its own library (``tl.sum``, ...) when
triton is first imported, the kernels when their modules (``forward_kernel``, ``backward_kernels``,
``score_tiles`` in ``fairseq_urpe.kernels``) are. So it is
set here, before any test module of this folder imports either, and it holds for the rest of the
process: real compiles (test_gpu_compile.py) run in a process of their own.
"""

import dataclasses
import os
import sys

import pytest

assert "triton" not in sys.modules or os.environ.get("TRITON_INTERPRET") == "1", (
    "triton was imported before the kernel tests set TRITON_INTERPRET=1: its library is compiled-mode "
    "and the interpreter cannot run the kernels in this process")
os.environ["TRITON_INTERPRET"] = "1"
assert not any(f"fairseq_urpe.kernels.{name}" in sys.modules for name in ("forward_kernel", "backward_kernels", "score_tiles")), \
    "kernel module imported before TRITON_INTERPRET was set"


@pytest.fixture(autouse=True)
def overflow_checks_only_where_addresses_are_tested(request):
    """Triton's interpreter checks every 32-bit integer add, subtract and multiply for overflow (its
    ``sanitize_overflow``), a quarter of its time here. At the suite's sizes no index comes near 2^31 (the
    largest tensor holds under a million elements), so it is kept on only in test_kernel_memory_bounds.py,
    the tests of the kernels' addresses; the kernels and every comparison are the same with it off."""
    try:
        from triton.runtime.interpreter import interpreter_builder as builder
    except ImportError:  # no triton: the kernel tests skip themselves
        yield
        return
    before = builder.options
    wanted = request.node.path.name == "test_kernel_memory_bounds.py"
    builder.options = dataclasses.replace(before, sanitize_overflow=wanted)
    yield
    builder.options = before
