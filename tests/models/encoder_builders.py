"""The encoder archs of the expressiveness benchmarks, built through fairseq's parser and the
``position_synthetic`` task, and a batch of its data."""

import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from tests.models.conftest import USER_DIR

LENGTH, VOCAB = 12, 20


def build(arch, *flags, task="etp"):
    parser = options.get_training_parser()
    argv = ["--task", "position_synthetic", "--synthetic-task", task, "--vocab-size", str(VOCAB),
            "--seq-len", str(LENGTH), "--arch", arch, "--criterion", "token_accuracy", "--user-dir", USER_DIR,
            "--cpu", *flags]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)
    return task.build_model(cfg.model).eval(), task


def tokens(task, batch=3):
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    return dataset.collater([dataset[i] for i in range(batch)])
