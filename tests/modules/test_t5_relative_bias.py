import pytest
import torch

from fairseq_urpe.modules import T5RelativeBias
from tests.reference import index_matrix, t5_bucket


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


@pytest.mark.parametrize("buckets,distance,flag", [(0, 128, "--rpe-num-buckets"), (32, 8, "--rpe-max-distance")])
def test_bad_bias_options_name_the_flag(buckets, distance, flag):
    with pytest.raises(ValueError, match=flag):
        T5RelativeBias(num_heads=2, num_buckets=buckets, max_distance=distance)
