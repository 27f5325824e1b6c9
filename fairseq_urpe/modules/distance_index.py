"""How a distance ``i - j`` indexes a learned table: T5's log-spaced buckets (Raffel et al. 2020) or the
clipped distance (Shaw et al. 2018). The functions work on tensors of distances; :class:`BucketIndex`
and :class:`ClippedIndex` fix their options once, at construction, and give the table's size."""

import math

import torch


def check_bucket_options(num_buckets: int, max_distance: int, bidirectional: bool, names=("num_buckets", "max_distance")):
    """Raise ``ValueError`` naming the option when the bucket layout is impossible.

    Each direction gets ``n = num_buckets`` (causal) or ``num_buckets // 2`` (bidirectional) buckets; the
    first ``n // 2`` are exact distances, the rest log-spaced up to ``max_distance``. That needs
    ``n >= 2`` and ``max_distance > n // 2``.
    """
    buckets_name, distance_name = names
    per_side = num_buckets // 2 if bidirectional else num_buckets
    if num_buckets <= 0 or per_side < 2:
        need = 4 if bidirectional else 2
        raise ValueError(f"{buckets_name} must be an integer >= {need}, got {num_buckets}")
    if max_distance <= per_side // 2:
        raise ValueError(
            f"{distance_name} must be greater than the {per_side // 2} exact buckets "
            f"({buckets_name}={num_buckets}), got {max_distance}"
        )


def relative_position_bucket(
    distance: torch.Tensor, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = False
) -> torch.Tensor:
    """Map ``distance = i - j`` (query minus key position, any shape, long) to a bucket in ``[0, num_buckets)``.

    With ``n`` buckets per direction and ``e = n // 2``: distances ``0 .. e-1`` get their own bucket,
    larger ones ``e + floor(log(d / e) / log(max_distance / e) * (n - e))``, capped at ``n - 1``.
    Causal (``bidirectional=False``): negative distances (future keys) share bucket 0. Bidirectional:
    keys after the query (``d < 0``) use the upper half of the buckets.
    """
    n = num_buckets
    bucket = torch.zeros_like(distance)
    if bidirectional:
        n = num_buckets // 2
        bucket = bucket + (distance < 0).long() * n
        distance = distance.abs()
    else:
        distance = distance.clamp(min=0)
    exact = n // 2
    is_small = distance < exact
    # float32 log is what T5 uses; clamp(min=1) only avoids log(0) on entries that is_small discards.
    log_ratio = torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    large = (exact + (log_ratio * (n - exact)).long()).clamp(max=n - 1)
    return bucket + torch.where(is_small, distance, large)


def clipped_distance_index(distance: torch.Tensor, max_distance: int, bidirectional: bool = False) -> torch.Tensor:
    """Index of ``distance = i - j`` in a per-distance table (Shaw et al.'s clipping).

    Causal: ``clamp(distance, 0, max_distance)`` (future keys, which the mask removes, read entry 0).
    Bidirectional: ``clamp(distance, -max_distance, max_distance) + max_distance``.
    """
    if bidirectional:
        return distance.clamp(-max_distance, max_distance) + max_distance
    return distance.clamp(0, max_distance)


class BucketIndex:
    """``distance -> relative_position_bucket(distance)``: a table of ``num_buckets`` entries.

    ``names``: the options that set ``num_buckets`` and ``max_distance``, for error messages.
    """

    def __init__(self, num_buckets: int, max_distance: int, bidirectional: bool = False,
                 names=("num_buckets", "max_distance")):
        check_bucket_options(num_buckets, max_distance, bidirectional, names)
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.size = num_buckets

    def __call__(self, distance: torch.Tensor) -> torch.Tensor:
        return relative_position_bucket(distance, self.num_buckets, self.max_distance, self.bidirectional)

    @property
    def constant_from(self) -> int:
        """The causal distance from which every distance reads the same bucket (the last one)."""
        if not hasattr(self, "_constant_from"):  # the options are fixed at construction
            entry = self(torch.arange(2 * self.max_distance + 2))  # past every bucket boundary
            changes = (entry[1:] != entry[:-1]).nonzero()
            self._constant_from = int(changes[-1]) + 1 if len(changes) else 0
        return self._constant_from

    def __repr__(self) -> str:
        return f"buckets={self.num_buckets}, max_distance={self.max_distance}, bidirectional={self.bidirectional}"


class ClippedIndex:
    """``distance -> clipped_distance_index(distance)``: one entry per distance ``|i - j| <= max_distance``
    (``max_distance + 1`` entries causal, ``2 max_distance + 1`` bidirectional).

    Farther distances read the last entry (``beyond_max="clamp"``) or raise (``"error"``). ``names``: what
    errors call ``max_distance`` and ``beyond_max`` (the config layer passes its options' names).
    """

    def __init__(self, max_distance: int, bidirectional: bool = False, beyond_max: str = "clamp",
                 names=("max_distance", "beyond_max")):
        name, self.beyond_name = names
        if max_distance <= 0:
            raise ValueError(f"{name} must be a positive integer, got {max_distance}")
        self.max_distance, self.bidirectional, self.beyond_max, self.name = max_distance, bidirectional, beyond_max, name
        self.size = (2 * max_distance + 1) if bidirectional else (max_distance + 1)

    def __call__(self, distance: torch.Tensor) -> torch.Tensor:
        if self.beyond_max == "error":
            # Only past distances (and, bidirectionally, future ones) can exceed the table; causal
            # future keys are masked and read entry 0.
            reach = distance.abs() if self.bidirectional else distance.clamp(min=0)
            longest = int(reach.max()) if reach.numel() else 0
            if longest > self.max_distance:
                raise ValueError(
                    f"the per-distance table covers distances up to {self.name}={self.max_distance} but the "
                    f"input needs {longest}; raise {self.name} or use {self.beyond_name} clamp"
                )
        return clipped_distance_index(distance, self.max_distance, self.bidirectional)

    @property
    def constant_from(self) -> int:
        """The causal distance from which every distance reads the same entry: the clip (with
        ``beyond_max="error"`` farther ones raise instead, when the table is read)."""
        return self.max_distance

    def __repr__(self) -> str:
        return f"max_distance={self.max_distance}, bidirectional={self.bidirectional}, beyond_max={self.beyond_max}"
