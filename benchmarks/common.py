"""Shared pieces of the benchmarks: the machine record, models built through fairseq, timing, JSON output."""

import argparse
import functools
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from typing import Dict, List

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # silence the profiler's start/stop lines (memory step)

import torch

# fairseq and hydra warn about their own deprecations on every model build; the benchmarks print tables.
warnings.filterwarnings("ignore")
for _name in ("fairseq", "hydra"):
    logging.getLogger(_name).setLevel(logging.WARNING)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(REPO, "fairseq_urpe")
STOCK_ARCH = "transformer_lm"
# Size-preset suffixes: archs with these do not share transformer_lm's base sizes.
SIZE_SUFFIXES = ("_tiny", "_wiki103", "_gpt2_small", "_gpt2_medium", "_gpt2_big", "_big", "_gbw")
SMOKE_SIZES = ["--decoder-layers", "1", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
               "--decoder-attention-heads", "2"]


def machine() -> Dict[str, object]:
    """What the numbers were measured on: CPU model, cores, torch and triton versions, GPU, load."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "cpu": cpu,
        "cpu_cores_visible": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "load_average_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def print_machine(info: Dict[str, object]) -> None:
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)


@functools.lru_cache(maxsize=None)
def base_size_archs() -> List[str]:
    """``transformer_lm`` and every plugin arch registered now with the same sizes (new kinds included).

    An arch qualifies when its preset gives transformer_lm's layers, width, FFN and heads; the model's
    own name (``relative_transformer_lm``, registered by fairseq as an arch too) is skipped.
    """
    import fairseq_urpe  # noqa: F401  (registers the archs)
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
    from fairseq_urpe.models.relative_transformer_lm import RelativeTransformerLanguageModel

    def sizes(arch):  # as fairseq-train resolves them: the arch preset, then the model's dataclass defaults
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[arch](args)
        defaults = getattr(ARCH_MODEL_REGISTRY[arch], "__dataclass")()
        keys = ("decoder_layers", "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_attention_heads")
        return tuple(getattr(args, key, getattr(defaults, key, None)) for key in keys)

    stock = sizes(STOCK_ARCH)
    found = [
        arch for arch, model in ARCH_MODEL_REGISTRY.items()
        if model is RelativeTransformerLanguageModel and arch != "relative_transformer_lm"
        and not arch.endswith(SIZE_SUFFIXES) and sizes(arch) == stock
    ]
    first = ["transformer_lm_rpe", "transformer_lm_urpe"]
    return [STOCK_ARCH] + [a for a in first if a in found] + sorted(a for a in found if a not in first)


_DICT_DIRS: Dict[int, str] = {}


def dictionary_dir(vocab: int) -> str:
    """A data directory holding only a dictionary of ``vocab`` words: all fairseq's language_modeling needs."""
    if vocab not in _DICT_DIRS:
        path = tempfile.mkdtemp(prefix=f"urpe-bench-dict{vocab}-")
        with open(os.path.join(path, "dict.txt"), "w") as f:
            f.write("".join(f"w{i} {100000 - i}\n" for i in range(vocab)))
        _DICT_DIRS[vocab] = path
    return _DICT_DIRS[vocab]


def build(arch: str, max_length: int, vocab: int, extra: List[str], optimizer: bool = True):
    """``(model, task, criterion, fairseq optimizer or None, cfg)`` built by fairseq's own parser and registry."""
    from fairseq import optim, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [dictionary_dir(vocab), "--task", "language_modeling", "--arch", arch, "--user-dir", USER_DIR,
            "--tokens-per-sample", str(max_length), "--optimizer", "adam", "--lr", "1e-4",
            "--criterion", "cross_entropy", "--seed", "1", *extra]
    if not torch.cuda.is_available():
        argv.append("--cpu")
    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(1)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    criterion.to(device)
    opt = None
    if optimizer:
        opt = optim.build_optimizer(cfg.optimizer, [p for p in model.parameters() if p.requires_grad])
    return model, task, criterion, opt, cfg


def make_sample(batch: int, length: int, vocab: int, device, seed: int = 0):
    """A language-modeling batch as fairseq's dataset gives it: tokens, next-token targets, counts."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, vocab + 4, (batch, length + 1), generator=generator)
    src, target = tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)
    return {
        "id": torch.arange(batch),
        "net_input": {"src_tokens": src, "src_lengths": torch.full((batch,), length)},
        "target": target,
        "ntokens": batch * length,
        "nsentences": batch,
    }


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def clock():
    """``(wall seconds, CPU seconds of this process)``, after the GPU (if any) has finished its queue.

    On a shared CPU machine wall time also counts the time other processes hold the cores; CPU time
    counts only this process's work (all its threads), so ratios of CPU time stay meaningful under
    load. With ``--threads 1`` it equals the wall time an idle core would take, up to cache effects.
    """
    synchronize()
    return time.perf_counter(), time.process_time()


def stopwatch(fn):
    """``(fn(), wall seconds, CPU seconds)`` of one call (see :func:`clock`)."""
    wall, cpu = clock()
    result = fn()
    wall_end, cpu_end = clock()
    return result, wall_end - wall, cpu_end - cpu


def timed(fn, repeats: int):
    """Median ``(wall seconds, CPU seconds)`` of ``fn()`` over ``repeats`` runs."""
    runs = [stopwatch(fn)[1:] for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def median_ratio(numerators: List[float], denominators: List[float]) -> float:
    """Median of per-round ratios: each round's numbers were taken minutes apart at most."""
    return statistics.median(n / d for n, d in zip(numerators, denominators))


def peak_memory_bytes(step, live_before: int = 0) -> int:
    """Peak live tensor bytes while ``step()`` runs.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU, where torch keeps no such counter: ``live_before``
    (what was live at the start, e.g. parameters and optimizer state, which the caller knows) plus the
    highest "Total Allocated" that torch's profiler (``profile_memory=True``) records during the step,
    the running sum of the step's own allocations minus its frees. Like the CUDA number it counts live
    tensors, unaffected by the allocator's caching that blurs the process RSS.
    """
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        step()
        return torch.cuda.max_memory_allocated()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    with tempfile.NamedTemporaryFile(suffix=".json") as trace:
        prof.export_chrome_trace(trace.name)
        with open(trace.name) as f:
            events = json.load(f)["traceEvents"]
    during = [e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"]
    return live_before + max([0] + during)


def write_json(path: str, payload: Dict[str, object]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {path}", flush=True)


def common_arguments(description: str, default_json: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and one round: checks the script runs, times nothing useful")
    parser.add_argument("--json", default=default_json, help="where to write the results (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")
    return parser


def apply_threads(threads) -> None:
    if threads:
        torch.set_num_threads(threads)


def start(args):
    """What every benchmark does first: ``--threads``, the machine record (printed), and the archs
    (``--archs``, else transformer_lm and every base-size plugin arch). Returns ``(machine, archs)``."""
    apply_threads(args.threads)
    info = machine()
    print_machine(info)
    return info, (args.archs or base_size_archs())


def save_results(args, script: str, argv, info: Dict[str, object], **fields) -> None:
    """Write ``args.json``: the benchmark's name, command, machine (before and after), settings, then ``fields``."""
    write_json(args.json, {
        "benchmark": os.path.splitext(os.path.basename(script))[0], "command": command_line(script, argv),
        "machine": info, "machine_after": machine()["load_average_1_5_15"],
        "settings": {k: v for k, v in vars(args).items() if k != "json"}, **fields,
    })

def command_line(script: str, argv=None) -> str:
    """How the benchmark was invoked: ``python -m benchmarks.<script> <arguments>``, from the repository root."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python", "-m", f"benchmarks.{os.path.splitext(os.path.basename(script))[0]}"] + arguments)
