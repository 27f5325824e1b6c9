"""Tensors inside guard memory: each a view into a larger buffer whose words before and after it hold a
sentinel, and the check that the sentinels held (bit for bit).

The float sentinel is -0.0, which an atomic ``+ 0.0`` (an out-of-bounds add of an all-masked sum)
turns into +0.0; any other write changes it too unless it writes -0.0 itself. Used by the guard-memory
test (under Triton's interpreter) and by ``benchmarks/gpu_check`` (``python -m benchmarks.gpu_check``, on a GPU). Imports only torch.
"""

from typing import Callable, List

import torch

GUARD_WORDS = 512  # each side: more than any tile reaches past a tensor

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class GuardedTensors:
    """Allocate tensors in the middle of sentinel-filled buffers on ``device``; :meth:`damaged` checks them."""

    def __init__(self, device="cpu"):
        self.device = device
        self.buffers = []  # (name, buffer, view, buffer as allocated)

    def new(self, name: str, shape, dtype: torch.dtype, fill: Callable) -> torch.Tensor:
        """A contiguous ``shape`` tensor holding ``fill(shape, dtype)`` between two guard regions."""
        numel = 1
        for size in shape:
            numel *= size
        sentinel = -0.0 if dtype.is_floating_point else 0x5A
        buffer = torch.full((GUARD_WORDS + numel + GUARD_WORDS,), sentinel, dtype=dtype, device=self.device)
        view = buffer[GUARD_WORDS:GUARD_WORDS + numel].view(shape)
        view.copy_(fill(shape, dtype).to(self.device))
        self.buffers.append((name, buffer, view, buffer.clone()))
        return view

    def extents(self):
        """``(first byte, end byte, name)`` of every view."""
        return [(v.data_ptr(), v.data_ptr() + v.numel() * v.element_size(), name) for name, _, v, _ in self.buffers]

    def damaged(self) -> List[str]:
        """One line per buffer whose guard words changed: its name and the changed words' offsets from
        the start of the view (negative: before it)."""
        bad = []
        for name, buffer, _, before in self.buffers:
            bits = _BITS[buffer.element_size()]
            now, was = buffer.view(bits), before.view(bits)
            changed = torch.nonzero(now != was).flatten().cpu()
            end = now.numel() - GUARD_WORDS
            outside = [int(i) - GUARD_WORDS for i in changed if i < GUARD_WORDS or i >= end]
            if outside:
                bad.append(f"{name}: {len(outside)} guard words changed, at {outside[:4]}"
                           f"{'...' if len(outside) > 4 else ''} (view size {end - GUARD_WORDS})")
        return bad
