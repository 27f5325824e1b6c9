"""Wang & E (NeurIPS 2024): error vs heads and layers on memory tasks, built from the plugin's modules.

    python -m benchmarks.expressiveness.memory_tasks --quick      # a few minutes on 1 CPU core
    python -m benchmarks.expressiveness.memory_tasks              # full size (see docs/expressiveness.md)

Causal models: a linear embedding, ``L`` pre-norm blocks of :class:`RelativeMultiheadAttention` (with an
optional FFN), a linear read-out; trained with Adam on fresh batches of ``fairseq_urpe.data.memory_tasks``,
scored by the relative error ``E = mean (y_hat - y)^2 / mean y^2`` on a held-out batch (0 is perfect,
1 is predicting 0). Four experiments, one per claim:

  heads   exp / poly decaying memory, dot-product-free, 1 layer, no FFN: lin-RPE (ALiBi, learned slopes)
          vs log-RPE, H = 1, 2, 4, ...  (claim: log-RPE needs far fewer heads for polynomial decay)
  dpf     fixed vs adaptive sparse memory, per-distance bias, 1 layer with FFN: dot product vs
          dot-product-free  (claim: dot-product-free suffices for fixed, not for adaptive)
  depth   nested memory (an induction head), dot product, per-distance bias: 1 vs 2 vs 3 layers
          (claim: depth helps nested memories)
  urpe    poly and fixed memory, lin-RPE, dot-product-free, 1 layer: RPE vs URPE (per-distance C)
Writes ``<out>/memory_results.md``, ``<out>/memory_results.json`` and ``<out>/memory.png``.
"""

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path

import torch
from torch import nn

from fairseq_urpe.data.memory_tasks import memory_batch
from fairseq_urpe.modules import ALiBiBias, LearnedDistanceBias, LogBias, RelativeMultiheadAttention, ToeplitzReweighting


class Block(nn.Module):
    def __init__(self, width, heads, kind, dot_product, urpe, ffn, max_len):
        super().__init__()
        bias = {"lin": lambda: ALiBiBias(heads, learnable=True), "log": lambda: LogBias(heads, learnable=True),
                "learned": lambda: LearnedDistanceBias(heads, max_len)}[kind]()
        toeplitz = ToeplitzReweighting(heads, "unique", max_distance=max_len) if urpe else None
        self.norm = nn.LayerNorm(width)
        self.attn = RelativeMultiheadAttention(width, heads, position_bias=bias, toeplitz=toeplitz, dot_product=dot_product)
        self.ffn = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width)) if ffn else None

    def forward(self, x, mask):  # x: (T, B, E)
        x = x + self.attn(self.norm(x), attn_mask=mask, need_weights=False)[0]
        return x + self.ffn(x) if self.ffn is not None else x


class MemoryModel(nn.Module):
    def __init__(self, d_in, width, heads, layers, kind, dot_product, urpe, ffn, max_len):
        super().__init__()
        self.embed = nn.Linear(d_in, width)
        self.blocks = nn.ModuleList(Block(width, heads, kind, dot_product, urpe, ffn, max_len) for _ in range(layers))
        self.out = nn.Linear(width, 1)

    def forward(self, x):  # (B, T, D) -> (B, T)
        length = x.size(1)
        mask = torch.full((length, length), float("-inf")).triu(1)  # causal, (T, T)
        h = self.embed(x).transpose(0, 1)  # (T, B, E)
        for block in self.blocks:
            h = block(h, mask)
        return self.out(h).squeeze(-1).transpose(0, 1)


def train_eval(task, heads, layers, kind, dot_product, urpe, ffn, a, seed):
    torch.manual_seed(seed)
    x_eval, y_eval = memory_batch(task, 256, a.length, markers=a.markers, seed=10**6 + seed)
    model = MemoryModel(x_eval.size(-1), a.width, heads, layers, kind, dot_product, urpe, ffn, a.length)
    # Position parameters (slopes, per-distance biases, C) learn 10x faster: the slopes start at ALiBi's
    # schedule (2^-8 for one head), far from a task's decay rate, and would otherwise spend the short
    # quick-mode budget getting there instead of showing what the scheme can represent.
    position = [p for n, p in model.named_parameters() if "position_bias" in n or "toeplitz" in n]
    others = [p for n, p in model.named_parameters() if not ("position_bias" in n or "toeplitz" in n)]
    groups = [{"params": others, "lr": a.lr}] + ([{"params": position, "lr": 10 * a.lr}] if position else [])
    opt = torch.optim.Adam(groups)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[g["lr"] for g in groups], total_steps=a.steps,
                                                pct_start=0.1)
    for step in range(a.steps):
        x, y = memory_batch(task, a.batch, a.length, markers=a.markers, seed=seed * 10**5 + step)
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    with torch.no_grad():
        return float((model(x_eval) - y_eval).pow(2).mean() / y_eval.pow(2).mean())


def experiments(a):
    """``[(experiment, row label, column label, config)]``."""
    runs = []
    for task in ("exp", "poly"):
        for kind in ("lin", "log"):
            for h in a.heads:
                runs.append(("heads", f"{task} / {kind}-RPE", h, dict(task=task, heads=h, layers=1, kind=kind,
                                                                      dot_product=False, urpe=False, ffn=False)))
    for task in ("fixed", "adaptive"):
        for dp in (True, False):
            for h in a.dpf_heads:
                runs.append(("dpf", f"{task} / {'dot product' if dp else 'dot-product-free'}", h,
                             dict(task=task, heads=h, layers=1, kind="learned", dot_product=dp, urpe=False, ffn=True)))
    for layers in a.layers:
        runs.append(("depth", "nested / dot product", layers, dict(task="nested", heads=2, layers=layers,
                                                                     kind="learned", dot_product=True, urpe=False, ffn=True)))
    for task in ("poly", "fixed"):
        for urpe in (False, True):
            for h in a.urpe_heads:
                runs.append(("urpe", f"{task} / lin-{'URPE' if urpe else 'RPE'}", h,
                             dict(task=task, heads=h, layers=1, kind="lin", dot_product=False, urpe=urpe, ffn=False)))
    return runs


COLUMN = {"heads": "heads", "dpf": "heads", "depth": "layers", "urpe": "heads"}
TITLES = {
    "heads": "decaying memory, dot-product-free, 1 layer: relative error vs heads",
    "dpf": "sparse memory, per-distance bias, 1 layer + FFN: relative error vs heads",
    "depth": "nested memory (induction), dot product, 2 heads: relative error vs layers",
    "urpe": "RPE vs URPE, lin-RPE, dot-product-free, 1 layer: relative error vs heads",
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short sequences, few steps, one seed (a few minutes)")
    p.add_argument("--out", default="benchmark-out/memory")
    p.add_argument("--only", default="heads dpf depth urpe", help="experiments to run")
    p.add_argument("--steps", type=int, default=None, help="override the training steps of the size")
    p.add_argument("--heads", default=None, help="override the head counts of the 'heads' experiment, e.g. '1 2 4 8'")
    a = p.parse_args(argv)
    steps, heads = a.steps, a.heads
    if a.quick:
        a.length, a.steps, a.batch, a.width, a.seeds = 64, 300, 32, 32, [0]
        a.heads, a.dpf_heads, a.layers, a.urpe_heads = [1, 2, 4], [1, 4], [1, 2], [1, 2]
    else:
        a.length, a.steps, a.batch, a.width, a.seeds = 128, 2000, 64, 64, [0, 1, 2]
        a.heads, a.dpf_heads, a.layers, a.urpe_heads = [1, 2, 4, 8, 16], [1, 2, 4, 8], [1, 2, 3], [1, 2, 4]
    a.lr, a.markers = 3e-3, 8
    a.steps = steps or a.steps
    a.heads = [int(h) for h in heads.split()] if heads else a.heads
    torch.set_num_threads(1)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"length {a.length}, {a.steps} steps of batch {a.batch}, width {a.width}, seeds {a.seeds}", flush=True)

    results, start = {}, time.time()
    for exp, row, col, cfg in experiments(a):
        if exp not in a.only.split():
            continue
        t0 = time.time()
        errors = [train_eval(a=a, seed=s, **cfg) for s in a.seeds]
        results.setdefault(exp, {}).setdefault(row, {})[col] = sum(errors) / len(errors)
        print(f"  {exp:6s} {row:32s} {COLUMN[exp]}={col}: error {results[exp][row][col]:.4f} ({time.time() - t0:.0f} s)",
              flush=True)
    wall = time.time() - start

    lines = [f"length {a.length}, {a.steps} Adam steps of batch {a.batch}, width {a.width}, lr {a.lr} (position parameters 10x), "
             f"mean over seeds {a.seeds}; {wall / 60:.1f} min in all. Relative error (0 perfect, 1 = predicting 0)."]
    for exp, rows in results.items():
        cols = sorted({c for r in rows.values() for c in r})
        lines += ["", f"**{exp}**: {TITLES[exp]}", "",
                  f"| task / model | " + " | ".join(f"{COLUMN[exp]}={c}" for c in cols) + " |",
                  "|---|" + "---:|" * len(cols)]
        for row, values in rows.items():
            lines.append(f"| {row} | " + " | ".join(f"{values[c]:.4f}" if c in values else "" for c in cols) + " |")
    table = "\n".join(lines)
    print(table)
    (out / "memory_results.md").write_text(table + "\n")
    (out / "memory_results.json").write_text(json.dumps(results, indent=1))

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # something upstream sets the root logger to DEBUG
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.6 * len(results), 3.8), squeeze=False)
    for ax, (exp, rows) in zip(axes[0], results.items()):
        for row, values in rows.items():
            cols = sorted(values)
            ax.plot(cols, [max(values[c], 1e-5) for c in cols], marker="o", label=row)
        ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(COLUMN[exp])
        ax.set_ylabel("relative error")
        ax.set_title(exp + ": " + TITLES[exp].split(":")[0], fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "memory.png", dpi=110)
    print(f"wrote {out / 'memory_results.md'} and {out / 'memory.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
