"""The hub interface in-process, and what the checkpoints hold. Trainings and command lines: lm_runs.py."""

import re

import pytest
import torch

from tests.checkpoints import load_checkpoint
from tests.cli.lm_runs import BUCKETS, HEADS, PROMPT, SCORE_SENTENCE, TPS, USER_DIR


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["urpe", "rpe"])
def test_hub_from_pretrained_scores_and_samples(trainings, brown_data, one_torch_thread, name):
    from fairseq.models.transformer_lm import TransformerLanguageModel

    run = trainings.model(name)
    lm = TransformerLanguageModel.from_pretrained(
        str(run.save_dir), "checkpoint_last.pt", str(brown_data.bin), user_dir=USER_DIR, tokenizer="moses"
    )
    lm.eval()

    from fairseq_urpe.models.relative_transformer_lm import RelativeTransformerLanguageModel
    from fairseq_urpe.modules import RelativeMultiheadAttention, ToeplitzReweighting

    model = lm.models[0]
    assert type(model) is RelativeTransformerLanguageModel
    attention = model.decoder.layers[0].self_attn
    assert isinstance(attention, RelativeMultiheadAttention)
    assert isinstance(attention.toeplitz, ToeplitzReweighting) if name == "urpe" else attention.toeplitz is None
    assert model.decoder.embed_positions is None

    assert all(word in brown_data.words for word in SCORE_SENTENCE.split())
    # score: one log-probability per token of the sentence (the final </s> is not scored).
    encoded = lm.encode(SCORE_SENTENCE)
    scored = lm.score(SCORE_SENTENCE)
    assert torch.equal(scored["tokens"], encoded[:-1])
    positional = scored["positional_scores"]
    assert positional.shape == (len(SCORE_SENTENCE.split()),)
    assert torch.isfinite(positional).all() and (positional < 0).all(), positional
    assert lm.decode(encoded) == "The committee said."  # the moses detokenizer is in use

    torch.manual_seed(0)
    sample = lm.sample(PROMPT, sampling=True, sampling_topk=10, max_len_b=10)
    assert isinstance(sample, str) and sample.startswith(PROMPT), sample
    assert len(lm.encode(sample)) > len(lm.encode(PROMPT)), f"nothing sampled: {sample!r}"
    assert not re.search(r" [.,;:!?]( |$)", sample), f"not detokenized: {sample!r}"

    # Incremental decoding (cached keys, positions from the cache) agrees with a full forward pass:
    # the scores recorded while sampling equal the scores of re-scoring the sampled tokens. Once up to
    # the first </s>, once forced to 2x the training length (distances past --rpe-max-distance 128).
    for seed, lengths in ((0, {"max_len_b": 40}), (1, {"min_len": 2 * TPS, "max_len_b": 2 * TPS})):
        torch.manual_seed(seed)
        hypo = lm.generate([lm.encode(PROMPT)], beam=1, sampling=True, sampling_topk=10, **lengths)[0][0]
        rescored = lm.generate([hypo["tokens"]], score_reference=True)[0][0]
        length = len(rescored["tokens"])
        assert length == len(hypo["tokens"]) - 1  # all but the final </s>
        if "min_len" in lengths:
            assert length == 2 * TPS, length
        # float32 sums over up to 256 keys in two different orders: observed differences <= ~3e-5.
        torch.testing.assert_close(
            hypo["positional_scores"][:length], rescored["positional_scores"], rtol=1e-5, atol=1e-4
        )


@pytest.mark.e2e
def test_checkpoints_hold_relative_position_weights(trainings):
    state = {name: load_checkpoint(trainings.model(name).checkpoint) for name in ("urpe", "rpe", "stock")}
    urpe, rpe, stock = (state[n]["model"] for n in ("urpe", "rpe", "stock"))
    assert state["urpe"]["cfg"]["model"]["urpe_toeplitz"] == "bucketed"
    assert state["rpe"]["cfg"]["model"]["urpe_toeplitz"] == "none"

    prefix = "decoder."  # one set shared by both layers (no --rpe-per-layer), stored once under the decoder
    assert urpe[prefix + "toeplitz.weight"].shape == (HEADS, BUCKETS)
    assert urpe[prefix + "position_bias.weight"].shape == (HEADS, BUCKETS)
    assert rpe[prefix + "position_bias.weight"].shape == (HEADS, BUCKETS)
    assert prefix + "toeplitz.weight" not in rpe
    for weights in (urpe, rpe):
        assert not any(k.startswith("decoder.layers.") and (".toeplitz." in k or ".position_bias." in k) for k in weights)
    # Trained away from its init (c = 1, b = 0).
    for weights, key, init in ((urpe, "toeplitz", 1.0), (urpe, "position_bias", 0.0), (rpe, "position_bias", 0.0)):
        first = weights[f"decoder.{key}.weight"]
        assert (first - init).abs().max() > 1e-3, (key, first)
    assert not any(".toeplitz." in k or ".position_bias." in k for k in stock)
    for weights in (urpe, rpe):
        assert not any("embed_positions" in k for k in weights)
