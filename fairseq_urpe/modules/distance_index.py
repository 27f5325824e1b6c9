"""How a distance ``i - j`` indexes a learned table: T5's log-spaced buckets (Raffel et al. 2020) or the
clipped distance (Shaw et al. 2018). The functions work on tensors of distances; :class:`BucketIndex`
and :class:`ClippedIndex` fix their options once, at construction, and give the table's size."""

import math

import torch


def check_bucket_options(num_buckets: int, max_distance: int, bidirectional: bool, names=("num_buckets", "max_distance")):
    """Raise ``ValueError`` naming the option when the bucket layout is impossible.

    Each direction gets ``n = num_buckets`` (causal) or ``num_buckets // 2`` (bidirectional) buckets; the
    first ``n // 2`` are exact distances, the rest log-spaced up to ``max_distance``. That needs
    ``n >= 2`` and ``max_distance > n // 2``. ``names``: what the errors call the two options; ``None`` for
    one the caller did not set (the config layer's defaults): the error then gives its value only.
    """
    buckets_name, distance_name = names
    per_side = num_buckets // 2 if bidirectional else num_buckets
    if num_buckets <= 0 or per_side < 2:
        need = 4 if bidirectional else 2
        raise ValueError(f"{buckets_name or 'num_buckets'} must be an integer >= {need}, got {num_buckets}")
    if max_distance <= per_side // 2:
        exact = per_side // 2
        if distance_name or not buckets_name:
            of_buckets = f"of {buckets_name} {num_buckets}" if buckets_name else f"of the {num_buckets} buckets"
            raise ValueError(f"{distance_name or 'max_distance'} must be greater than {exact}, the exact distances "
                             f"{of_buckets}; got {max_distance}")
        most = 2 * max_distance - 1 if not bidirectional else 4 * max_distance - 1
        raise ValueError(f"{buckets_name} must be at most {most}: its {exact} exact buckets must end before "
                         f"distance {max_distance}, where the log-spaced buckets end; got {num_buckets}")


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
        self._constant_from = None
        self._boundaries = {}  # device -> first_distances(0 .. per_side - 1): where each bucket starts

    def __call__(self, distance: torch.Tensor) -> torch.Tensor:
        """The bucket of each ``distance`` (long, any shape), read off the distances where the buckets start
        (:meth:`first_distances`, found once per device): the bucket of ``|d|`` is the number of those at or
        below ``|d|``, less one (the bucket grows with ``|d|``); equal to :meth:`bucket`."""
        boundaries = self._boundaries.get(distance.device)
        if boundaries is None:
            boundaries = self._boundaries[distance.device] = self.first_distances(
                torch.arange(self.per_side)).to(distance.device)
        if not self.bidirectional:  # a future key (d < 0) reads bucket 0, as d = 0 does
            return torch.searchsorted(boundaries, distance.clamp(min=0), right=True) - 1
        return torch.searchsorted(boundaries, distance.abs(), right=True) - 1 + (distance < 0).long() * self.per_side

    def bucket(self, distance: torch.Tensor) -> torch.Tensor:
        """:func:`relative_position_bucket` with this index's options, computed (what :meth:`__call__` reads)."""
        return relative_position_bucket(distance, self.num_buckets, self.max_distance, self.bidirectional)

    @property
    def per_side(self) -> int:
        """Buckets per direction: all of them causal, half bidirectional."""
        return self.num_buckets // 2 if self.bidirectional else self.num_buckets

    def first_distances(self, buckets: torch.Tensor) -> torch.Tensor:
        """Per bucket ``e`` of ``buckets`` (long), the smallest causal distance ``d >= 0`` whose bucket is
        ``>= e`` (``2 max_distance + 1`` if none is). The bucket grows with ``d``, so a bisection over
        ``0 .. 2 max_distance + 1`` finds it: ``O(len(buckets) log max_distance)``, never ``O(max_distance)``."""
        low = torch.zeros_like(buckets)
        high = torch.full_like(buckets, 2 * self.max_distance + 1)  # past every bucket boundary
        while bool((low < high).any()):
            middle = (low + high) // 2
            reached = self.bucket(middle) >= buckets
            high, low = torch.where(reached, middle, high), torch.where(reached, low, middle + 1)
        return low

    def nearest_distances(self) -> torch.Tensor:
        """``(size,)`` float32: per bucket, the smallest ``|i - j|`` that reads it; ``2 max_distance`` for a
        bucket no distance reads (an odd bidirectional bucket, or more buckets than distances)."""
        nearest = torch.full((self.size,), float(2 * self.max_distance))
        buckets = torch.arange(self.per_side)
        first = self.first_distances(buckets)  # keys at or before the query: buckets 0 .. per_side - 1
        nearest[: self.per_side] = torch.where(self.bucket(first) == buckets, first.float(), nearest[: self.per_side])
        if self.bidirectional:  # keys after the query, |d| >= 1: the upper half
            after = first.clamp(min=1)
            upper = nearest[self.per_side : 2 * self.per_side]
            reads = self.bucket(after) == buckets
            nearest[self.per_side : 2 * self.per_side] = torch.where(reads, after.float(), upper)
        return nearest

    @property
    def constant_from(self) -> int:
        """The causal distance from which every distance reads the same bucket: the first of the last one
        (a bisection, run once: it depends on the options only)."""
        if self._constant_from is None:
            last = self.bucket(torch.tensor([2 * self.max_distance + 1]))  # past every bucket boundary
            self._constant_from = int(self.first_distances(last)[0])
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
                    f"input needs {longest}: inputs of at most {self.max_distance + 1} tokens stay within it "
                    f"(--tokens-per-sample, --context-window), or {self.beyond_name} clamp reuses its last entry "
                    f"for farther distances (for a trained model: --model-overrides "
                    f"\"{{'urpe_beyond_max': 'clamp'}}\"); a larger {self.name} means training anew"
                )
        return clipped_distance_index(distance, self.max_distance, self.bidirectional)

    def nearest_distances(self) -> torch.Tensor:
        """``(size,)`` float32: per entry, the smallest ``|i - j|`` that reads it (``|entry - max_distance|``
        bidirectional, the entry causal)."""
        entries = torch.arange(self.size)
        return (entries - self.max_distance if self.bidirectional else entries).abs().float()

    @property
    def constant_from(self) -> int:
        """The causal distance from which every distance reads the same entry: the clip (with
        ``beyond_max="error"`` farther ones raise instead, when the table is read)."""
        return self.max_distance

    def __repr__(self) -> str:
        return f"max_distance={self.max_distance}, bidirectional={self.bidirectional}, beyond_max={self.beyond_max}"
