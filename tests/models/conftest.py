import os

import pytest
import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

USER_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "fairseq_urpe")
VOCAB = 40


@pytest.fixture(scope="session")
def dict_dir(tmp_path_factory):
    """A data directory holding only a dictionary: enough for fairseq's language_modeling task."""
    path = tmp_path_factory.mktemp("dict")
    (path / "dict.txt").write_text("".join(f"w{i} {1000 - i}\n" for i in range(VOCAB)))
    return str(path)


@pytest.fixture
def build_lm(dict_dir):
    """``build_lm(arch, *flags) -> (model, cfg)`` through fairseq's own parser, config and task."""

    def build(arch, *flags, tokens_per_sample=16):
        parser = options.get_training_parser()
        argv = [dict_dir, "--task", "language_modeling", "--arch", arch, "--user-dir", USER_DIR, "--cpu"]
        argv += ["--tokens-per-sample", str(tokens_per_sample), *flags]
        cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
        task = tasks.setup_task(cfg.task)
        torch.manual_seed(0)
        return task.build_model(cfg.model), cfg

    return build
