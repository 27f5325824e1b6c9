"""URPE's learnable Toeplitz reweighting ``C_ij = c_h(i - j)`` (Luo et al., NeurIPS 2022, eq. 3)."""

import torch
from torch import nn

from .precision import at_least_float32
from .relative_bucket import check_bucket_options, clipped_distance_index, relative_position_bucket
from .relative_position import RelativePositionFunction

PARAMETERISATIONS = ("bucketed", "unique")
BEYOND_MAX = ("clamp", "error")


class ToeplitzReweighting(RelativePositionFunction):
    """Per-head Toeplitz matrix multiplied element-wise onto the softmax probabilities; starts at one.

    ``forward(query_positions (T,), key_positions (S,)) -> (H, T, S)`` ``C``, at least float32.

    Parameterisations:
      - ``bucketed``: ``c_h(bucket(i - j))`` with T5's log-spaced buckets (``num_buckets``,
        ``max_distance``); defined at every length.
      - ``unique``: one entry per distance ``|i - j| <= max_distance`` (the authors' synthetic setup).
        Beyond the table, ``beyond_max="clamp"`` reuses the entry at ``max_distance`` and
        ``beyond_max="error"`` raises. Causal tables hold distances ``0..max_distance`` (future keys,
        which the mask removes, read entry 0); bidirectional tables also hold ``-max_distance..-1``.
    """

    def __init__(
        self,
        num_heads: int,
        parameterisation: str = "bucketed",
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = False,
        beyond_max: str = "clamp",
    ):
        super().__init__()
        if parameterisation not in PARAMETERISATIONS:
            raise ValueError(
                f"--urpe-toeplitz must be one of {', '.join(PARAMETERISATIONS)}; got {parameterisation!r}"
            )
        if beyond_max not in BEYOND_MAX:
            raise ValueError(f"--urpe-beyond-max must be one of {', '.join(BEYOND_MAX)}; got {beyond_max!r}")
        if parameterisation == "bucketed":
            check_bucket_options(
                num_buckets, max_distance, bidirectional, names=("--rpe-num-buckets", "--rpe-max-distance")  # c shares b's buckets
            )
            size = num_buckets
        else:
            if max_distance <= 0:
                raise ValueError(f"--urpe-max-distance must be a positive integer, got {max_distance}")
            size = (2 * max_distance + 1) if bidirectional else (max_distance + 1)
        self.num_heads = num_heads
        self.parameterisation = parameterisation
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.beyond_max = beyond_max
        self.weight = nn.Parameter(torch.ones(num_heads, size))  # c_h(index): (H, size)

    def indices(self, distance: torch.Tensor) -> torch.Tensor:
        """Table index of each ``distance = i - j`` (any shape, long)."""
        if self.parameterisation == "bucketed":
            return relative_position_bucket(distance, self.num_buckets, self.max_distance, self.bidirectional)
        if self.beyond_max == "error":
            # Only past distances (and, bidirectionally, future ones) can exceed the table; causal
            # future keys are masked and read entry 0.
            reach = distance.abs() if self.bidirectional else distance.clamp(min=0)
            longest = int(reach.max()) if reach.numel() else 0
            if longest > self.max_distance:
                raise ValueError(
                    f"unique URPE table covers distances up to --urpe-max-distance={self.max_distance} but the "
                    f"input needs {longest}; raise --urpe-max-distance or use --urpe-beyond-max clamp"
                )
        return clipped_distance_index(distance, self.max_distance, self.bidirectional)

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        return at_least_float32(self.weight)[:, self.indices(distance)]  # (H, ...)

    def extra_repr(self) -> str:
        size = f"num_buckets={self.num_buckets}, " if self.parameterisation == "bucketed" else ""
        return (
            f"num_heads={self.num_heads}, parameterisation={self.parameterisation}, {size}"
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}, beyond_max={self.beyond_max}"
        )
