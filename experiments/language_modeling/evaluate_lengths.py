"""Test perplexity of one checkpoint at the training length L and at k x L (fairseq-eval-lm's own main).

    python -m experiments.language_modeling.evaluate_lengths --data DATA_BIN --checkpoint CKPT --out JSON [--factors 1 2 4]

For each factor k: non-overlapping blocks of k x L tokens, each scored from the start of its block
(fairseq-eval-lm ``--tokens-per-sample kL --context-window 0``), as in examples/wikitext103/eval.sh's
extrapolation sweep, whose runner (``eval_lm_table.run_eval_lm``: it lifts fairseq's length bound for
sinusoidal and relative positions) this reuses. Perplexity per token (fairseq's: words and one
end-of-sentence per line). A factor counts only if every token of the split was scored.
Writes ``{"split", "train_length", "num_updates", "params", "rows": [{"factor", "block", "loss_base2",
"ppl", "tokens", "status"}]}``.
"""

import argparse
import json
import os
from pathlib import Path
from types import SimpleNamespace

from experiments.sweeps import load_script

REPO = Path(__file__).resolve().parents[2]


def eval_lm_table():
    return load_script(REPO / "examples/wikitext103/eval_lm_table.py")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--cpu", action="store_true")
    a = parser.parse_args(argv)

    import torch

    table = eval_lm_table()
    state = torch.load(a.checkpoint, map_location="cpu", weights_only=False)
    train_length = state["cfg"]["task"]["tokens_per_sample"]
    model_cfg = state["cfg"]["model"]
    absolute_learned = bool(model_cfg.get("decoder_learned_pos")) and not model_cfg.get("no_token_positional_embeddings")
    num_updates = state["optimizer_history"][-1]["num_updates"]
    del state
    total = table.split_tokens(a.data, a.split)
    args = SimpleNamespace(data=a.data, checkpoint=a.checkpoint, user_dir=str(REPO / "fairseq_urpe"),
                           max_tokens=0, softmax_batch=1024, cpu=a.cpu, fp16=False)
    rows, params = [], None
    for k in a.factors:
        block = k * train_length
        args.max_tokens = 4 * block
        loss, tokens, params = table.run_eval_lm(args, a.split, block, 0, absolute_learned, train_length)
        ok = tokens == total
        rows.append({"factor": k, "block": block, "loss_base2": loss if ok else None, "ppl": 2 ** loss if ok else None,
                     "tokens": tokens, "status": "ok" if ok else f"incomplete: {tokens} of {total} tokens scored"})
    report = {"split": a.split, "train_length": train_length, "num_updates": num_updates, "params": params, "rows": rows}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, a.out)
    return report


if __name__ == "__main__":
    main()
