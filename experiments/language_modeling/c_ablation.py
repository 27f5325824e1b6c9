"""How much a trained URPE model relies on its C: test perplexity with the learned ``c`` and with ``c = 1``.

    python -m experiments.language_modeling.c_ablation --data DATA_BIN CHECKPOINT... [--tokens-per-sample L]

For each checkpoint, fairseq-eval-lm's own main (via examples/wikitext103/eval_lm_table.py) scores the test
split in non-overlapping blocks of L tokens, once as trained and once with every Toeplitz table set to one
(which turns the model into its RPE counterpart with the same weights). Prints one markdown row each,
with the range of the learned ``c``.
"""

import argparse
import os
import tempfile

import torch

from fairseq_urpe.checkpoint_file import read_checkpoint

from .evaluate_lengths import eval_lm_table, score_blocks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--tokens-per-sample", type=int, default=0, help="L; 0: the training length")
    parser.add_argument("--trust-checkpoint-code", action="store_true", default=None,
                        help="load checkpoints that need code to load (full unpickling: only for trusted files)")
    a = parser.parse_args(argv)
    table = eval_lm_table()
    print("| checkpoint | c min .. max | test ppl, learned c | test ppl, c = 1 |\n|---|---|---:|---:|")
    for path in a.checkpoints:
        state = read_checkpoint(path, a.trust_checkpoint_code, mmap=False)
        length = a.tokens_per_sample or state["cfg"]["task"]["tokens_per_sample"]
        tables = [k for k in state["model"] if k.endswith("toeplitz.weight")]
        if not tables:
            raise SystemExit(f"c_ablation.py: {path} has no URPE Toeplitz table (an RPE or stock model?)")
        c = torch.cat([state["model"][k].flatten() for k in tables])
        for k in tables:
            state["model"][k] = torch.ones_like(state["model"][k])
        with tempfile.TemporaryDirectory() as tmp:
            reset = os.path.join(tmp, "c_one.pt")
            torch.save(state, reset)
            ppl = []
            for checkpoint in (path, reset):
                loss, _, _ = score_blocks(table, a.data, checkpoint, "test", length, True, cpu=True,
                                          trust_code=a.trust_checkpoint_code)
                ppl.append(2 ** loss)
        print(f"| {path} | {float(c.min()):.2f} .. {float(c.max()):.2f} | {ppl[0]:.2f} | {ppl[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
