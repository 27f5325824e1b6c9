import pytest
import torch

from fairseq_urpe.modules import LearnedDistanceBias, T5RelativeBias
from tests.reference import index_matrix, press_alibi_slopes, t5_bucket, unique_index


def test_bias_is_table_entry_of_t5_bucket_for_every_pair():
    torch.manual_seed(0)
    bias = T5RelativeBias(num_heads=3, num_buckets=8, max_distance=20)
    torch.nn.init.normal_(bias.weight)
    tgt_len, src_len = 5, 41  # queries at the last 5 of 41 positions, as in incremental decoding
    got = bias(torch.arange(src_len - tgt_len, src_len), torch.arange(src_len))
    index = index_matrix(tgt_len, src_len, lambda d: t5_bucket(d, 8, 20))
    assert got.shape == (3, tgt_len, src_len) and got.dtype == torch.float32
    for h in range(3):
        assert torch.equal(got[h], bias.weight[h][index])


def test_bias_starts_at_zero_and_is_float32_for_half_parameters():
    bias = T5RelativeBias(num_heads=2).half()
    out = bias(torch.arange(4), torch.arange(4))
    assert out.dtype == torch.float32 and not out.any()


@pytest.mark.parametrize("buckets,distance,name", [(0, 128, "num_buckets"), (32, 8, "max_distance")])
def test_bad_bias_arguments_are_named_as_the_caller_says(buckets, distance, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):  # a module names its argument, no flag
        T5RelativeBias(num_heads=2, num_buckets=buckets, max_distance=distance)
    flag = "--" + name.replace("_", "-")  # the config layer passes its options' names
    with pytest.raises(ValueError, match=f"^{flag} must be"):
        T5RelativeBias(num_heads=2, num_buckets=buckets, max_distance=distance, names={name: flag})


@pytest.mark.parametrize("bidirectional", [False, True])
def test_alibi_start_is_minus_press_slope_times_nearest_distance_of_each_bucket(bidirectional):
    heads, buckets, max_distance = 3, 12, 40
    bias = T5RelativeBias(heads, buckets, max_distance, bidirectional, start="alibi")
    distances = range(-3 * max_distance, 3 * max_distance + 1)
    for bucket in range(buckets):
        reach = [abs(d) for d in distances if t5_bucket(d, buckets, max_distance, bidirectional) == bucket]
        if not reach:  # a bucket no distance falls in (bidirectional: -0) is never read
            continue
        for h, slope in enumerate(press_alibi_slopes(heads)):
            assert bias.weight[h, bucket].item() == pytest.approx(-slope * min(reach), rel=1e-6)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_learned_distance_bias_alibi_start_is_alibis_line_up_to_the_clip(bidirectional):
    bias = LearnedDistanceBias(2, max_distance=5, bidirectional=bidirectional, start="alibi")
    slopes = press_alibi_slopes(2)
    for d in range(-8 if bidirectional else 0, 9):
        for h in range(2):
            expected = -slopes[h] * min(abs(d), 5)
            assert bias.weight[h, unique_index(d, 5, bidirectional)].item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("make", [lambda s: T5RelativeBias(2, start=s), lambda s: LearnedDistanceBias(2, start=s)])
def test_bad_start_names_the_argument(make):
    assert not make("zero").weight.any()
    with pytest.raises(ValueError, match="^start must be one of alibi, zero; got 'normal'"):
        make("normal")
