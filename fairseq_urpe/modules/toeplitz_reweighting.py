"""URPE's learnable Toeplitz reweighting ``C_ij = c_h(i - j)`` (Luo et al., NeurIPS 2022, eq. 3)."""

from typing import Mapping

from torch import nn

from .distance_index import BucketIndex, ClippedIndex
from .learned_table import LearnedTable

PARAMETERISATIONS = ("bucketed", "unique")
BEYOND_MAX = ("clamp", "error")


class ToeplitzReweighting(LearnedTable):
    """Per-head Toeplitz matrix multiplied element-wise onto the softmax probabilities; starts at one.

    ``forward(query_positions (T,), key_positions (S,)) -> (H, T, S)`` ``C``, at least float32.

    Parameterisations (the same tables as the biases, starting at 1 instead of 0):
      - ``bucketed``: ``c_h(bucket(i - j))`` with T5's log-spaced buckets (``num_buckets``,
        ``max_distance``), as :class:`T5RelativeBias`; defined at every length.
      - ``unique``: one entry per distance ``|i - j| <= max_distance`` (the authors' synthetic setup), as
        :class:`LearnedDistanceBias`. Beyond the table, ``beyond_max="clamp"`` reuses the entry at
        ``max_distance`` and ``beyond_max="error"`` raises. Causal tables hold distances ``0..max_distance``
        (future keys, which the mask removes, read entry 0); bidirectional tables also ``-max_distance..-1``.

    ``names``: what errors call the arguments (default: their names; the config layer passes its options').
    """

    def __init__(
        self,
        num_heads: int,
        parameterisation: str = "bucketed",
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = False,
        beyond_max: str = "clamp",
        names: Mapping[str, str] = {},
    ):
        name = {k: names.get(k, k) for k in ("parameterisation", "num_buckets", "max_distance", "beyond_max")}
        if parameterisation not in PARAMETERISATIONS:
            raise ValueError(f"{name['parameterisation']} must be one of {', '.join(PARAMETERISATIONS)}; "
                             f"got {parameterisation!r}")
        if beyond_max not in BEYOND_MAX:
            raise ValueError(f"{name['beyond_max']} must be one of {', '.join(BEYOND_MAX)}; got {beyond_max!r}")
        if parameterisation == "bucketed":  # c shares b's buckets
            index = BucketIndex(num_buckets, max_distance, bidirectional, names=(name["num_buckets"], name["max_distance"]))
        else:
            index = ClippedIndex(max_distance, bidirectional, beyond_max, names=(name["max_distance"], name["beyond_max"]))
        super().__init__(num_heads, index)
        self.parameterisation = parameterisation

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)  # C = 1: URPE starts exactly as RPE

    def extra_repr(self) -> str:
        return f"parameterisation={self.parameterisation}, {super().extra_repr()}"
