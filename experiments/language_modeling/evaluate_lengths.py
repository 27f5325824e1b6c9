"""Test perplexity of one checkpoint at the training length L and at k x L (fairseq-eval-lm's own main).

    python -m experiments.language_modeling.evaluate_lengths --data DATA_BIN --checkpoint CKPT --out JSON [--factors 1 2 4]

For each factor k: non-overlapping blocks of k x L tokens, each scored from the start of its block
(fairseq-eval-lm ``--tokens-per-sample kL --context-window 0``), as in examples/wikitext103/eval.sh's
extrapolation rows, whose runner (``eval_lm_table.eval_lm_argv`` and ``run_eval_lm``: the arguments lift
fairseq's length bound for sinusoidal and relative positions) this reuses. Perplexity per token (fairseq's: words and one
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


def score_blocks(table, data, checkpoint, split, block, extends, cpu, trust_code=None):
    """fairseq-eval-lm on non-overlapping blocks of ``block`` tokens, batches of 4 blocks: (loss base 2,
    tokens scored, parameters). ``extends``: the model's positions reach past its training length."""
    args = SimpleNamespace(data=data, checkpoint=checkpoint, cpu=cpu, fp16=False)
    row = dict(split=split, break_mode="none", tokens_per_sample=block, context_window=0,
               max_target_positions=block if extends else None)
    return table.run_eval_lm(table.eval_lm_argv(args, row, 4 * block), trust_code)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--trust-checkpoint-code", action="store_true", default=None,
                        help="load a checkpoint that needs code to load (full unpickling: only for trusted files)")
    a = parser.parse_args(argv)

    from fairseq_urpe.checkpoint_file import read_checkpoint

    table = eval_lm_table()
    state = read_checkpoint(a.checkpoint, a.trust_checkpoint_code)
    train_length = state["cfg"]["task"]["tokens_per_sample"]
    model_cfg = state["cfg"]["model"]
    absolute_learned = bool(model_cfg.get("decoder_learned_pos")) and not model_cfg.get("no_token_positional_embeddings")
    num_updates = state["optimizer_history"][-1]["num_updates"]
    del state
    total = int(table.split_sizes(a.data, a.split).sum())
    rows, params = [], None
    for k in a.factors:
        block = k * train_length
        loss, tokens, params = score_blocks(table, a.data, a.checkpoint, a.split, block, not absolute_learned, a.cpu,
                                            a.trust_checkpoint_code)
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
