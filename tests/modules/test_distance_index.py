import pytest
import torch

from fairseq_urpe.modules.distance_index import check_bucket_options, relative_position_bucket
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
        (32, 16, False, "max_distance must be greater than the 16 exact buckets"),
        (32, -1, False, "max_distance must be greater than"),
    ],
)
def test_impossible_bucket_layouts_are_refused(num_buckets, max_distance, bidirectional, message):
    with pytest.raises(ValueError, match=message):
        check_bucket_options(num_buckets, max_distance, bidirectional)
