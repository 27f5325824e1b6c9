import subprocess
import sys
import textwrap

import pytest
import torch

from fairseq_urpe.modules.distance_index import BucketIndex, ClippedIndex, check_bucket_options, relative_position_bucket
from tests.reference import t5_bucket


LAYOUTS = [(32, 128), (8, 20), (17, 1000)]


@pytest.mark.parametrize(
    "num_buckets,max_distance,bidirectional",
    [(n, m, False) for n, m in LAYOUTS + [(2, 3)]] + [(n, m, True) for n, m in LAYOUTS + [(4, 3)]],
)
def test_buckets_match_scalar_t5_definition(num_buckets, max_distance, bidirectional):
    distance = torch.arange(-3000, 3001)
    got = relative_position_bucket(distance, num_buckets, max_distance, bidirectional)
    want = torch.tensor([t5_bucket(int(d), num_buckets, max_distance, bidirectional) for d in distance])
    assert torch.equal(got, want)
    used = 2 * (num_buckets // 2) if bidirectional else num_buckets  # an odd bucket is left over
    assert int(got.min()) == 0 and int(got.max()) == used - 1


def test_t5_default_causal_buckets_at_known_distances():
    # Hand-computed: 16 exact buckets, then 16 + floor(log(d/16)/log(8)*16), capped at 31.
    distance = torch.tensor([-5, 0, 1, 15, 16, 17, 22, 32, 64, 127, 128, 10_000])
    want = torch.tensor([0, 0, 1, 15, 16, 16, 18, 21, 26, 31, 31, 31])
    assert torch.equal(relative_position_bucket(distance, 32, 128), want)


@pytest.mark.parametrize(
    "num_buckets,max_distance,bidirectional,message",
    [
        (0, 128, False, "num_buckets must be an integer >= 2, got 0"),
        (-4, 128, False, "num_buckets must be an integer >= 2, got -4"),
        (1, 128, False, "num_buckets must be an integer >= 2, got 1"),
        (3, 128, True, "num_buckets must be an integer >= 4, got 3"),
        (32, 16, False, "max_distance must be greater than 16, the exact distances of num_buckets 32; got 16"),
        (32, -1, False, "max_distance must be greater than"),
    ],
)
def test_impossible_bucket_layouts_are_refused(num_buckets, max_distance, bidirectional, message):
    with pytest.raises(ValueError, match=message):
        check_bucket_options(num_buckets, max_distance, bidirectional)


def nearest_by_scan(index, reach: int) -> torch.Tensor:
    """Per entry, the smallest ``|d|`` over ``-reach..reach`` that reads it, else ``2 max_distance``."""
    distance = torch.arange(-reach, reach + 1)
    entries = index(distance)
    nearest = torch.full((index.size,), float(2 * index.max_distance))
    for entry in range(index.size):
        reading = distance[entries == entry]
        if len(reading):
            nearest[entry] = float(reading.abs().min())
    return nearest


def constant_from_by_scan(index, reach: int) -> int:
    entries = index(torch.arange(reach + 1))
    changes = (entries[1:] != entries[:-1]).nonzero()
    return int(changes[-1]) + 1 if len(changes) else 0


@pytest.mark.parametrize("num_buckets,max_distance,bidirectional",
                         [(32, 128, False), (32, 128, True), (8, 5, False), (6, 3, True), (4, 100, True), (63, 40, True),
                          (32, 17, False), (17, 1000, False)])
def test_bucket_nearest_distances_and_constant_from_equal_a_scan_over_every_distance(num_buckets, max_distance, bidirectional):
    index = BucketIndex(num_buckets, max_distance, bidirectional)
    reach = 2 * max_distance + 2  # past every bucket boundary
    assert torch.equal(index.nearest_distances(), nearest_by_scan(index, reach))
    assert index.constant_from == constant_from_by_scan(index, reach)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_clipped_nearest_distances_equal_a_scan(bidirectional):
    index = ClippedIndex(7, bidirectional)
    assert torch.equal(index.nearest_distances(), nearest_by_scan(index, 20))


def test_a_billion_token_bucket_range_builds_in_the_memory_of_its_32_buckets():
    """T5's and URPE's bucketed tables at --rpe-max-distance 1e9 under an address-space limit of 1 GiB past
    what the interpreter holds: work in the buckets, never an ``arange`` over the distances (32 GB)."""
    script = textwrap.dedent('''
        import resource
        from fairseq_urpe.modules import T5RelativeBias, ToeplitzReweighting
        held = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (held + (1 << 30), resource.RLIM_INFINITY))
        bias = T5RelativeBias(4, 32, 10**9, start="alibi")
        c = ToeplitzReweighting(4, "bucketed", 32, 10**9)
        print(bias.constant_from, c.constant_from, bias.nearest_distances()[-1].item())
    ''')
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    constant_from, c_constant_from, last_nearest = result.stdout.split()
    index = BucketIndex(32, 10**9)
    first = int(constant_from)  # the first distance of the last bucket: the one before it reads bucket 30
    assert int(c_constant_from) == first and float(last_nearest) == torch.tensor(float(first)).item()  # float32
    assert index(torch.tensor([first - 1, first, 10**9, 10**12])).tolist() == [30, 31, 31, 31]


def test_the_bucket_boundary_search_runs_once_per_index_not_per_forward(monkeypatch):
    """``constant_from`` depends on the options only: every table a forward makes reads it, and the bisection
    behind it runs at its first read alone."""
    index = BucketIndex(32, 128)
    calls = []
    search = BucketIndex.first_distances
    monkeypatch.setattr(BucketIndex, "first_distances", lambda self, b: calls.append(1) or search(self, b))
    assert [index.constant_from for _ in range(5)] == [index.constant_from] * 5
    assert len(calls) == 1


@pytest.mark.parametrize(
    "num_buckets,max_distance,bidirectional",
    [(n, m, False) for n, m in LAYOUTS + [(2, 3), (64, 40)]] + [(n, m, True) for n, m in LAYOUTS + [(4, 3), (63, 40)]],
)
def test_the_index_reads_buckets_off_their_boundaries_equal_to_the_formula(num_buckets, max_distance, bidirectional):
    """``BucketIndex(d)`` reads the bucket off where each bucket starts; it equals the formula everywhere: near,
    past ``max_distance``, far past it, future keys, and in any shape."""
    index = BucketIndex(num_buckets, max_distance, bidirectional)
    distance = torch.cat([torch.arange(-4 * max_distance - 5, 4 * max_distance + 6),
                          torch.tensor([10**6, -10**6, 10**12, -10**12])])
    assert torch.equal(index(distance), relative_position_bucket(distance, num_buckets, max_distance, bidirectional))
    square = distance[:50, None] - distance[None, :40]  # (50, 40)
    assert torch.equal(index(square), relative_position_bucket(square, num_buckets, max_distance, bidirectional))
    assert index(square).dtype == torch.long


def test_the_bucket_formula_runs_once_per_index_and_device_not_per_call(monkeypatch):
    """The buckets of a call's distances are read off boundaries found once (per device): neither the
    formula nor the boundary search runs again, whatever distances later calls bring."""
    calls = {"bucket": 0, "first_distances": 0}
    for name in calls:
        real = getattr(BucketIndex, name)
        monkeypatch.setattr(BucketIndex, name, lambda self, x, real=real, name=name: calls.__setitem__(
            name, calls[name] + 1) or real(self, x))
    index = BucketIndex(32, 128)
    want = relative_position_bucket(torch.arange(-5, 600), 32, 128)
    first = index(torch.arange(-5, 600))
    once = dict(calls)
    assert once["first_distances"] >= 1
    for length in (7, 300, 600, 2000):
        assert torch.equal(index(torch.arange(1 - length, length)),
                           relative_position_bucket(torch.arange(1 - length, length), 32, 128))
    assert calls == once
    assert torch.equal(first, want)
