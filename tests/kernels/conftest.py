"""The kernel tests run Triton's interpreter on CPU (numpy): no GPU needed, slow, so shapes stay small.

Triton reads TRITON_INTERPRET when a function is decorated: its own library (``tl.sum``, ...) when
triton is first imported, the kernels when ``fairseq_urpe.kernels.fused_urpe_attention`` is. So it is
set here, before any test module of this folder imports either, and it holds for the rest of the
process: real compiles (test_gpu_compile.py) run in a process of their own.
"""

import os
import sys

assert "triton" not in sys.modules or os.environ.get("TRITON_INTERPRET") == "1", (
    "triton was imported before the kernel tests set TRITON_INTERPRET=1: its library is compiled-mode "
    "and the interpreter cannot run the kernels in this process")
os.environ["TRITON_INTERPRET"] = "1"
assert "fairseq_urpe.kernels.fused_urpe_attention" not in sys.modules, "kernel module imported before TRITON_INTERPRET was set"
