"""``end_to_end``: training steps of the ``_wiki103`` archs, stock, dense and fused."""

import statistics
import time

import torch

from .record import GPU, Record, cases, run_case


def end_to_end(record: Record, args) -> None:
    from benchmarks.common import SMOKE_SIZES, build, make_sample

    if GPU:
        length, vocab, warmup, steps = 3072, 267744, 3, 20
        extra = ["--fp16", "--optimizer", "nag", "--lr", "1.0", "--clip-norm", "0.1", "--criterion", "adaptive_loss",
                 "--max-tokens", str(length), "--ddp-backend", "legacy_ddp"]
        runs = [("transformer_lm_wiki103", None), ("transformer_lm_rpe_wiki103", "dense"),
                ("transformer_lm_rpe_wiki103", "auto"), ("transformer_lm_urpe_wiki103", "dense"),
                ("transformer_lm_urpe_wiki103", "auto")]
    else:
        length, vocab, warmup, steps = 24, 100, 1, 2
        extra = ["--optimizer", "nag", "--lr", "1.0", "--clip-norm", "0.1", "--criterion", "adaptive_loss",
                 "--adaptive-input-cutoff", "20,40", "--adaptive-softmax-cutoff", "20,40", "--max-tokens", str(length),
                 *SMOKE_SIZES, "--attention-dropout", "0.1", "--ddp-backend", "legacy_ddp"]
        runs = [("transformer_lm_wiki103", None), ("transformer_lm_urpe_wiki103", "fused")]

    def train(arch, impl):
        from fairseq.trainer import Trainer

        from fairseq_urpe.kernels.dispatch import FusedBackend

        calls = []
        real = FusedBackend.run
        FusedBackend.run = lambda *a, **k: calls.append(1) or real(*a, **k)
        try:
            flags = extra + (["--urpe-attention-impl", impl] if impl else [])
            model, task, criterion, _, cfg = build(arch, length, vocab, flags, optimizer=False)
            trainer = Trainer(cfg, task, model, criterion)
            sample = make_sample(1, length, vocab, "cpu")
            for _ in range(warmup):
                trainer.train_step([sample])
            if GPU:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                trainer.train_step([sample])
                if GPU:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            per_update = statistics.median(times)
            result = {"arch": arch, "impl": impl or "stock", "tokens_per_update": length,
                      "median_update_ms": per_update * 1e3, "tokens_per_s": length / per_update,
                      "fused_calls": len(calls), "params": sum(p.numel() for p in model.parameters()),
                      "loss": float(trainer.get_meter("train_loss").avg) if trainer.get_meter("train_loss") else None}
            if GPU:
                result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
            # auto must have taken the fused path where the kernel passed its self-check
            result["ok"] = impl not in ("fused", "auto") or len(calls) > 0
            del trainer, model
            return result
        finally:
            FusedBackend.run = real
            if GPU:
                torch.cuda.empty_cache()

    for arch, impl in cases(record, runs):
        run_case(record, f"{arch} {impl or 'stock'}", lambda: train(arch, impl))
    by = {(r.get("arch"), r.get("impl")): r for r in record.entry["results"] if "median_update_ms" in r}
    stock = by.get(("transformer_lm_wiki103", "stock"))
    if stock:
        for r in record.entry["results"]:
            if "median_update_ms" in r:
                r["time_per_update_vs_stock"] = r["median_update_ms"] / stock["median_update_ms"]
        record.write()
