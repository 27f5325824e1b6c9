"""What the installed torch can do on this machine, as pytest markers."""

import pytest
import torch


def cpu_float16_supported() -> bool:
    """Old torch (e.g. 2.1, used with fairseq 0.12.2) has no float16 matmul or autocast on CPU."""
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            torch.nn.Linear(2, 2)(torch.ones(1, 2))
        torch.nn.Linear(2, 2).half()(torch.ones(1, 2).half())
        return True
    except RuntimeError:
        return False


needs_cpu_float16 = pytest.mark.skipif(not cpu_float16_supported(), reason="this torch has no float16 on CPU")
