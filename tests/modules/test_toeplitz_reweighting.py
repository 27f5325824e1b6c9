import pytest
import torch

from fairseq_urpe.modules import ToeplitzReweighting
from tests.reference import index_matrix, t5_bucket, unique_index


def randomised(module):
    torch.nn.init.uniform_(module.weight, -2.0, 2.0)
    return module


def test_starts_at_ones_so_urpe_starts_as_rpe():
    for parameterisation in ("bucketed", "unique"):
        c = ToeplitzReweighting(4, parameterisation, num_buckets=8, max_distance=16)
        assert torch.equal(c(torch.arange(9), torch.arange(9)), torch.ones(4, 9, 9))


def test_bucketed_entries_follow_t5_buckets():
    c = randomised(ToeplitzReweighting(3, "bucketed", num_buckets=8, max_distance=20))
    got = c(torch.arange(30), torch.arange(30))
    index = index_matrix(30, 30, lambda d: t5_bucket(d, 8, 20))
    for h in range(3):
        assert torch.equal(got[h], c.weight[h][index])


@pytest.mark.parametrize("bidirectional", [False, True])
def test_unique_has_one_entry_per_distance_and_clamps_beyond(bidirectional):
    c = randomised(ToeplitzReweighting(2, "unique", max_distance=6, bidirectional=bidirectional))
    assert c.weight.shape == (2, 13 if bidirectional else 7)
    got = c(torch.arange(15), torch.arange(15))
    index = index_matrix(15, 15, lambda d: unique_index(d, 6, bidirectional))
    for h in range(2):
        assert torch.equal(got[h], c.weight[h][index])
    # Query 14: keys 0..8 are 14..6 back and all read the entry of distance 6; keys 9..14 read 5..0.
    zero = 6 if bidirectional else 0  # row of distance 0
    assert torch.equal(got[0, 14, :9], c.weight[0, zero + 6].expand(9))
    assert torch.equal(got[0, 14, 9:], c.weight[0, zero : zero + 6].flip(0))


def test_unique_error_mode_refuses_lengths_beyond_the_table():
    c = ToeplitzReweighting(2, "unique", max_distance=6, beyond_max="error")
    c(torch.arange(7), torch.arange(7))  # distance 6 is in the table
    with pytest.raises(ValueError, match="max_distance=6 but the input needs 7: inputs of at most 7 tokens stay within it .*beyond_max clamp reuses its last entry"):
        c(torch.arange(8), torch.arange(8))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(parameterisation="sparse"), "^parameterisation must be one of bucketed, unique; got 'sparse'"),
        (dict(parameterisation="unique", max_distance=0), "^max_distance must be a positive integer, got 0"),
        (dict(parameterisation="unique", max_distance=-3), "^max_distance must be a positive integer"),
        (dict(parameterisation="unique", beyond_max="wrap"), "^beyond_max must be one of clamp, error"),
        (dict(parameterisation="bucketed", num_buckets=0), "^num_buckets must be an integer >= 2"),
        (dict(parameterisation="sparse", names={"parameterisation": "--urpe-toeplitz"}),
         "^--urpe-toeplitz must be one of bucketed, unique"),  # what the config layer passes
    ],
)
def test_bad_toeplitz_arguments_are_named_as_the_caller_says(kwargs, message):
    """A module names its arguments (no command-line flag); the config layer passes its options' names."""
    with pytest.raises(ValueError, match=message):
        ToeplitzReweighting(2, **kwargs)
