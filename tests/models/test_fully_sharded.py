"""``--ddp-backend fully_sharded``: fairseq builds the model inside fairscale's wrapping context, with its
own ``fsdp_enable_wrap``. fairscale's FSDP needs CUDA, so on CPU the plugin stops with an error naming
the option (without fairscale, fairseq stops first, asking for it). That the shared b and c sit outside
the layers FSDP wraps one by one is tested in test_shared_positions.py."""

import importlib.util

import pytest
import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.distributed.fully_sharded_data_parallel import fsdp_enable_wrap

from tests.models.conftest import USER_DIR


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA, fully_sharded is meant to run")
@pytest.mark.parametrize("arch", ["transformer_lm_urpe_tiny", "transformer_lm_rpe_tiny"])
def test_fully_sharded_on_cpu_stops_with_an_error_naming_the_option(dict_dir, arch):
    argv = [dict_dir, "--task", "language_modeling", "--arch", arch, "--user-dir", USER_DIR, "--cpu",
            "--ddp-backend", "fully_sharded", "--checkpoint-activations", "--tokens-per-sample", "16"]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    task = tasks.setup_task(cfg.task)
    if importlib.util.find_spec("fairscale") is None:
        with pytest.raises(ImportError, match="pip install fairscale"):
            with fsdp_enable_wrap(cfg.distributed_training):
                pass
        return
    with fsdp_enable_wrap(cfg.distributed_training):  # as fairseq_cli/train.py builds the model
        with pytest.raises(RuntimeError, match="--ddp-backend fully_sharded needs CUDA"):
            task.build_model(cfg.model)
