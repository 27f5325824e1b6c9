"""Precision rule shared by the position modules and the attention: at least float32."""

import torch


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 if it is half/bfloat16 (or float32), unchanged if it is float64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))
