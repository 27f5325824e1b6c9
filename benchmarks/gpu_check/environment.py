"""``environment``: versions, the GPU, TF32, compute-sanitizer, the kernel's tiles."""

import os
import shutil
import subprocess
import sys

import torch

from .record import GPU, Record


def environment(record: Record, args) -> None:
    import triton

    from fairseq_urpe.kernels import fused_urpe_attention as kernel
    from fairseq_urpe.kernels import tiles

    info = {
        "torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0],
        "cuda_runtime": torch.version.cuda, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
        "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR"),
        "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "compute_sanitizer": sanitizer_path(),
        "tiles": {f"{dtype} d{d}": tiles.gpu_blocks(d, getattr(torch, dtype))
                  for dtype in ("bfloat16", "float32") for d in (64, 128)},
    }
    try:
        import fairseq
        info["fairseq"] = fairseq.__version__
    except ImportError as error:
        info["fairseq"] = f"not importable: {error}"
    if GPU:
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}", memory_gib=round(props.total_memory / 2**30, 1),
                    multiprocessors=props.multi_processor_count, gpus_visible=torch.cuda.device_count())
        try:
            info["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                                                 "--format=csv,noheader"], capture_output=True, text=True,
                                                timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as error:
            info["nvidia_smi"] = str(error)
    record.add({"case": "environment", "ok": True, **info})


def sanitizer_path():
    for path in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
                 "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if path and os.path.exists(path):
            return path
    return None
