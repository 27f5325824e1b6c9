"""The kernel tests run Triton's interpreter on CPU (numpy): no GPU needed, slow, so shapes stay small.

Triton reads TRITON_INTERPRET when a kernel is decorated, that is when
``fairseq_urpe.kernels.fused_urpe_attention`` is first imported, so it is set here, before any test
module of this folder imports it. Nothing else in the suite imports that module.
"""

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
assert "fairseq_urpe.kernels.fused_urpe_attention" not in sys.modules, "kernel module imported before TRITON_INTERPRET was set"
