"""The paper size is the URPE authors' encoder (github.com/lsj2408/URPE, simulate_*.sh and their fairseq
fork's roberta model): no dropout, unscaled embeddings, BERT's initialisation, the LM head untied on request."""

import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from tests.models.conftest import USER_DIR


def parse(arch, *flags):
    parser = options.get_training_parser()
    argv = ["--task", "position_synthetic", "--vocab-size", "20", "--seq-len", "12", "--arch", arch,
            "--criterion", "token_accuracy", "--user-dir", USER_DIR, "--cpu", *flags]
    return convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))


def test_paper_preset_has_the_authors_dropout_embedding_scale_and_initialisation():
    model = parse("relative_encoder_urpe_paper").model
    assert (model.dropout, model.attention_dropout, model.activation_dropout) == (0.0, 0.0, 0.0)
    assert model.no_scale_embedding and model.apply_bert_init and not model.encoder_normalize_before
    assert model.layernorm_embedding and not model.untie_weights_roberta
    cpu = parse("relative_encoder_urpe_cpu").model  # reduced sizes keep fairseq's width-scaled start
    assert not cpu.apply_bert_init and not cpu.no_scale_embedding and cpu.dropout == 0.0


def test_bert_init_draws_weights_and_b_from_n_0_002_keeps_c_at_one_and_head_unties_on_request():
    cfg = parse("relative_encoder_urpe_tiny", "--apply-bert-init", "--no-scale-embedding", "--untie-weights-roberta",
                "--encoder-embed-dim", "128", "--encoder-ffn-embed-dim", "512")
    torch.manual_seed(0)
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    attn = model.encoder.layers[0].self_attn
    for weight in (attn.q_proj.weight, attn.v_proj.weight, model.encoder.layers[0].fc1.weight,
                   model.encoder.embed_tokens.weight[4:], attn.position_bias.weight):
        assert abs(weight.std().item() - 0.02) < 0.004
    assert torch.equal(attn.q_proj.bias, torch.zeros_like(attn.q_proj.bias))
    assert torch.equal(attn.toeplitz.weight, torch.ones_like(attn.toeplitz.weight))
    assert model.encoder.embed_scale == 1.0
    assert model.head.weight is not model.encoder.embed_tokens.weight
    tied = tasks.setup_task(cfg.task).build_model(parse("relative_encoder_urpe_tiny").model)
    assert tied.head.weight is tied.encoder.embed_tokens.weight


def test_bert_init_builds_dot_product_free_encoders_which_have_no_query_projection():
    cfg = parse("relative_encoder_rpe_tiny", "--apply-bert-init", "--dot-product-free")
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    assert model.encoder.layers[0].self_attn.q_proj is None
    assert abs(model.encoder.layers[0].self_attn.position_bias.weight.std().item() - 0.02) < 0.01
