"""Where a trained sum-to-max model's heads look at the scored position.

Sum-to-max's target is ``y = x_{t-g1} + x_{t-g2}`` (memory_claims.memory_batch). One head can read both memories
by splitting its weight equally between the keys at lags g1 and g2 (twice its output is then y); a head that
reads one memory puts its weight on one of them. This retrains seeds of memory_claims' 1-head sum-to-max cells
(memory_claims.train_model: the same training, so the test error must equal the run record's) and reads, per
layer, the weight ``w1`` on lag g1 and ``w2`` on lag g2 in the scored row, over the test sequences with g1 != g2:

    both   mean of w1 + w2            the weight on the two memories
    less   mean of min(w1, w2)        0.5 for an even split, 0 for a head on one memory (or none)
    split  share of rows with min(w1, w2) >= 0.25: where the head reads both memories

    python -m experiments.expressiveness.summax_attention --layers 2 --seeds "0 1" --steps 36000 \\
        --out docs/expressiveness/summax_36000    # retrains (2 models side by side), kept beside earlier ones
    python -m experiments.expressiveness.summax_attention --layers 3 --seeds "2 4" --steps 36000 \\
        --out docs/expressiveness/summax_36000
    python -m experiments.expressiveness.summax_attention --no-train --out docs/expressiveness/summax_36000
    (--keep-models DIR saves each trained model; --from-models DIR reads them again instead of training)
"""

import argparse
import json
import sys
import time
from pathlib import Path

from experiments.expressiveness import memory_claims
from experiments.runs_file import read_runs
from experiments.study_driver import train_side_by_side

SPLIT = 0.25  # a row "splits" where each of the two lags holds at least this weight


def lag_shares(weights, first, second, lags):
    """``weights`` (B, S): a layer's attention row at the scored position t = S - 1; ``first``, ``second`` (B,):
    the lags g1, g2 in 1..``lags``. Over the rows with g1 != g2: ``{"both": mean(w1 + w2), "less": mean(min(w1,
    w2)), "split": share of rows with min(w1, w2) >= SPLIT, "rows": count, "by_lag": {"first": [mean w1 over the
    rows with g1 = l for l in 1..lags], "second": [the same of w2 by g2]}}`` (None for a lag no row has)."""
    import torch

    t = weights.size(1) - 1
    keep = first != second
    rows = torch.arange(weights.size(0))[keep]
    g1, g2 = first[keep], second[keep]
    w1, w2 = weights[rows, t - g1], weights[rows, t - g2]
    less = torch.minimum(w1, w2)

    def by_lag(w, g):
        return [float(w[g == lag].mean()) if bool((g == lag).any()) else None for lag in range(1, lags + 1)]

    return {"both": float((w1 + w2).mean()), "less": float(less.mean()), "split": float((less >= SPLIT).float().mean()),
            "rows": int(keep.sum()), "by_lag": {"first": by_lag(w1, g1), "second": by_lag(w2, g2)}}


def scored_rows(model, x):
    """``(y (B,), [weights (B, S) per layer])``: the model's prediction and each layer's attention row at the last
    position, by the same steps as MemoryModel.forward (a test checks the prediction against it)."""
    import torch

    length = x.size(1)
    mask = torch.full((length, length), float("-inf")).triu(1)
    rows = []
    with torch.no_grad():
        h = model.embed(x).transpose(0, 1)
        for block in model.blocks:
            out, weights = block.attn(block.norm(h), attn_mask=mask, need_weights=True)  # weights (B, T, S)
            h = h + out
            h = h + block.ffn(h) if block.ffn is not None else h
            rows.append(weights[:, -1])
        y = model.out(h).squeeze(-1).transpose(0, 1)[:, -1]
    return y, rows


def read(model, config, size, seed):
    """A trained model's test relative error and the lag shares of each layer, on ``seed``'s test sequences."""
    x_test, y_test, (first, second) = memory_claims.test_batch(config, size, seed)
    error = memory_claims.relative_error(model, x_test, y_test)[0]
    _, rows = scored_rows(model, x_test)
    return {"error": error, "layers": [lag_shares(w, first, second, config["lags"]) for w in rows]}


def model_path(folder, config, seed):
    return Path(folder) / f"summax_L{config['layers']}_seed{seed}.pt"


def inspect(config, size, seed, keep=None, kept=None):
    """Retrain one seed (or, from the folder ``kept``, load the model an earlier ``keep`` saved) and read it; the
    weights' moving average is saved in the folder ``keep`` where given."""
    import torch

    from experiments.expressiveness.memory_model import MemoryModel

    if kept:
        inputs = memory_claims.test_batch(config, size, seed)[0].size(-1)
        model = MemoryModel(inputs, memory_claims.WIDTH, config["heads"], config["layers"], "learned",
                            config["dot_product"], True, memory_claims.LENGTH, seed=seed)
        model.load_state_dict(torch.load(model_path(kept, config, seed), weights_only=True))
    else:
        model = memory_claims.train_model(config, size, seed)[0]
    if keep:
        torch.save(model.state_dict(), model_path(keep, config, seed))
    return read(model.eval(), config, size, seed)


def markdown(result):
    depth = max(r["config"]["layers"] for r in result["runs"])
    lines = [f"Where the 1-head sum-to-max models look, {result['steps']} steps (`summax_attention`; retrained: the "
             "test error beside the run record's). Per layer, over the test sequences with g1 != g2: the mean weight "
             "the scored position puts on the keys at lags g1 and g2 together (both), on the less-attended of the two "
             f"(less: 0.5 for an even split, 0 for a head on one memory), and the share of sequences where each "
             f"holds {SPLIT} or more (split).", "",
             "| layers | seed | test error (record) | "
             + " | ".join(f"layer {i + 1}: both, less, split" for i in range(depth)) + " |",
             "|---:|---:|---|" + "---|" * depth]
    for r in result["runs"]:
        shares = [f"{s['both']:.3f}, {s['less']:.3f}, {s['split']:.3f}" for s in r["layers"]]
        shares += [""] * (depth - len(r["layers"]))
        record = "–" if r["record"] is None else f"{r['record']:.4f}"
        lines.append(f"| {r['config']['layers']} | {r['seed']} | {r['error']:.4f} ({record}) | " + " | ".join(shares)
                     + " |")
    lags = len(result["runs"][0]["layers"][0]["by_lag"]["first"])
    lines += ["", "By lag l: the mean weight on lag g1 over the sequences with g1 = l, and on lag g2 over those with "
              "g2 = l (w1 / w2; both near 0.5: the head splits its weight between the two memories at that lag).", "",
              "| layers | seed | layer | " + " | ".join(str(lag) for lag in range(1, lags + 1)) + " |",
              "|---:|---:|---:|" + "---|" * lags]
    for r in result["runs"]:
        for i, s in enumerate(r["layers"]):
            cells = ["–" if a is None or b is None else f"{a:.2f} / {b:.2f}"
                     for a, b in zip(s["by_lag"]["first"], s["by_lag"]["second"])]
            lines.append(f"| {r['config']['layers']} | {r['seed']} | {i + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default="2", help="the 1-head cells to read: 2, 3 or '2 3'")
    p.add_argument("--seeds", default="0 1")
    p.add_argument("--steps", type=int, default=memory_claims.STEPS)
    p.add_argument("--smoke", action="store_true", help="a few steps on small batches (seconds)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--no-train", action="store_true", help="the tables again from OUT/summax_attention.json")
    p.add_argument("--keep-models", default=None, help="a folder to save each trained model in")
    p.add_argument("--from-models", default=None, help="read the models an earlier --keep-models saved in this folder "
                                                      "instead of training them")
    p.add_argument("--out", default="docs/expressiveness/summax_36000")
    a = p.parse_args(argv)
    out = Path(a.out)
    path = out / "summax_attention.json"
    if a.no_train:
        result = json.loads(path.read_text())
    else:
        size = dict(memory_claims.SMOKE) if a.smoke else dict(batch=memory_claims.BATCH, eval=memory_claims.EVAL,
                                                             valid=memory_claims.VALID,
                                                             eval_every=memory_claims.EVAL_EVERY)
        size["steps"] = a.steps
        configs = [dict(task="summax", lags=16, heads=1, layers=int(n), dot_product=True) for n in a.layers.split()]
        calls = [(c, size, int(s), a.keep_models, a.from_models) for c in configs for s in a.seeds.split()]
        if a.keep_models:
            Path(a.keep_models).mkdir(parents=True, exist_ok=True)
        same_budget = read_runs(out / "memory_claims_runs.jsonl", lambda r: r.get("budget", {}).get("steps") == a.steps)
        records = {key: r["error"] for key, r in same_budget.items()}
        earlier = json.loads(path.read_text()) if path.exists() else {"steps": a.steps, "runs": []}
        if earlier["steps"] != a.steps:
            p.error(f"--steps {a.steps}: {path} holds runs of {earlier['steps']} steps; give another --out")
        retrained = {(c["layers"], s) for c, _, s, _, _ in calls}
        runs = [r for r in earlier["runs"] if (r["config"]["layers"], r["seed"]) not in retrained]
        start = time.time()
        for (config, _, seed, _, _), got in train_side_by_side(inspect, calls, a.jobs):
            key = memory_claims.key_of(config, seed)
            runs.append({"config": config, "seed": seed, "record": records.get(key), **got})
            print(f"  {key}: {got['error']:.4f} (record {records.get(key)}), {time.time() - start:.0f} s", flush=True)
        result = {"steps": a.steps, "runs": sorted(runs, key=lambda r: (r["config"]["layers"], r["seed"]))}
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
    (out / "summax_attention.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
