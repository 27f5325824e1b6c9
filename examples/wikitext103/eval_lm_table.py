"""Evaluate one checkpoint with fairseq-eval-lm in several settings and write the tables (eval.sh).

    python eval_lm_table.py --data DATA_BIN --checkpoint CKPT --out-dir DIR [options]

For each split: the standard non-overlapping evaluation at the training length L (blocks of L tokens,
each scored from the start of its block), the sliding-window evaluation (fairseq's --context-window
C: blocks of L - C new tokens, each scored after up to C tokens of context), and the extrapolation
sweep (non-overlapping blocks of k x L tokens for each k of --extrapolate; k = 1 is the standard row).
Each setting is one run of fairseq-eval-lm's own main() (fairseq_cli.eval_lm), in this process so that
fairseq is imported once.

Perplexity per word. fairseq-eval-lm reports the mean loss per scored token in base 2 (loss) over
``tokens`` scored tokens, so the split's total negative log-likelihood is NLL = loss * ln 2 * tokens
nats. With ``words`` from DATA_BIN/words.json (binarize.sh: whitespace-separated words plus one end of
line per line), ppl_word = exp(NLL / words) = 2 ** (loss * tokens / words). For word-level data
tokens == words and this is fairseq's own perplexity; for SentencePiece data it puts the subword
model on the same per-word scale. A row counts only if every token of the split was scored:
fairseq-eval-lm silently skips blocks longer than the model's maximum length, so a row whose token
count falls short is marked "incomplete" with no perplexity.

Writes eval.json and eval.md in --out-dir (each atomically). Exit status 1 if a row at the training
length (standard or sliding) failed or was incomplete; extrapolation rows that fail (a model with
learned absolute positions cannot go past L) are reported in the tables and do not fail the run.
"""

import argparse
import json
import logging
import math
import os
import sys
import time
import traceback

from fairseq_urpe.fairseq_runs import evaluated_tokens, model_params


class Capture(logging.Handler):
    """Keeps the messages of fairseq_cli.eval_lm's logger (token count, parameter count)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    @property
    def text(self):
        return "\n".join(self.messages)


def split_tokens(data, split):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    dataset = MMapIndexedDataset(os.path.join(data, split))  # keep it alive: sizes is a view of its mmap
    return int(dataset.sizes.sum())


def run_eval_lm(args, split, tokens_per_sample, context_window, absolute_learned, train_length):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import eval_lm

    argv = [
        args.data, "--path", args.checkpoint, "--user-dir", args.user_dir, "--gen-subset", split,
        "--sample-break-mode", "none", "--tokens-per-sample", str(tokens_per_sample),
        "--context-window", str(context_window), "--max-tokens", str(max(args.max_tokens, tokens_per_sample)),
        "--softmax-batch", str(args.softmax_batch), "--num-workers", "0", "--distributed-world-size", "1",
        "--log-format", "simple", "--log-interval", "1000000", "--seed", "1",
    ]
    if tokens_per_sample > train_length and not absolute_learned:
        # fairseq's models report max_target_positions (the training length) as their maximum length
        # whatever their positions can do; sinusoidal and relative positions extend, so raise it.
        # Learned absolute positions cannot: left as is, their longer blocks are skipped (incomplete).
        argv += ["--model-overrides", repr({"max_target_positions": tokens_per_sample})]
    if args.cpu:
        argv.append("--cpu")
    if args.fp16:
        argv.append("--fp16")
    parser = options.get_eval_lm_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, input_args=argv))
    capture = Capture()
    logger = logging.getLogger("fairseq_cli.eval_lm")
    logger.addHandler(capture)
    try:
        result = eval_lm.main(cfg)
    finally:
        logger.removeHandler(capture)
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass
    return float(result["loss"]), evaluated_tokens(capture.text), model_params(capture.text)


def evaluate(args, row, train_length, absolute_learned, words):
    total = split_tokens(args.data, row["split"])
    row["split_tokens"] = total
    row["words"] = words.get(row["split"])
    start = time.time()
    try:
        loss, tokens, params = run_eval_lm(args, row["split"], row["tokens_per_sample"], row["context_window"],
                                           absolute_learned, train_length)
    except Exception as error:  # one setting failing must not lose the others
        traceback.print_exc()
        row.update(status=f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}")
        return None
    finally:
        row["seconds"] = round(time.time() - start, 1)
    row["tokens"] = tokens
    if tokens != total:
        row["status"] = (f"incomplete: {tokens} of {total} tokens scored (fairseq-eval-lm skips blocks longer "
                         f"than the model's maximum length)")
        return params
    row["loss_base2"] = loss
    row["ppl_token"] = 2 ** loss
    if row["words"]:
        row["ppl_word"] = 2 ** (loss * tokens / row["words"])
    row["status"] = "ok"
    return params


def fmt(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown(report):
    head = report["model"]
    lines = [
        f"# {head['run']}: {head['arch']}",
        "",
        f"checkpoint `{head['checkpoint']}` ({head['num_updates']} updates, {head['params']:,} parameters), "
        f"trained on blocks of L = {head['train_tokens_per_sample']} tokens; data `{report['data']}` "
        f"({report['unit']}). Perplexity per word: 2 ** (loss_base2 * tokens / words).",
        "",
        "| split | evaluation | block | context | tokens scored | ppl per word | ppl per token | status |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['split']} | {row['name']} | {row['tokens_per_sample']} | {row['context_window']} | "
            f"{row.get('tokens') if row.get('tokens') is not None else 'n/a'} | {fmt(row.get('ppl_word'))} | "
            f"{fmt(row.get('ppl_token'))} | {row['status']} |"
        )
    sweep = report["extrapolation"]
    if sweep["factors"]:
        length = head["train_tokens_per_sample"]
        lines += ["", "Extrapolation: non-overlapping blocks of k x L tokens (1L is the row above), perplexity per word:", "",
                  "| split | " + " | ".join(f"{k}L = {k * length}" for k in sweep["factors"]) + " |",
                  "|---|" + "---:|" * len(sweep["factors"])]
        for split in report["splits"]:
            lines.append(f"| {split} | " + " | ".join(fmt(sweep["ppl_word"][split][str(k)]) for k in sweep["factors"]) + " |")
    return "\n".join(lines) + "\n"


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--user-dir", required=True)
    parser.add_argument("--run", default="")
    parser.add_argument("--splits", default="valid,test")
    parser.add_argument("--tokens-per-sample", type=int, default=0, help="L; 0: the checkpoint's training length")
    parser.add_argument("--context-window", type=int, default=-1, help="-1: L - L // 6 (2560 for L = 3072)")
    parser.add_argument("--extrapolate", default="1,2,4", help="factors k of the k x L sweep")
    parser.add_argument("--max-tokens", type=int, default=0, help="tokens per batch (at least one block); 0: 4 L")
    parser.add_argument("--softmax-batch", type=int, default=1024)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()

    import torch

    state = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    cfg = state["cfg"]
    train_length = cfg["task"]["tokens_per_sample"]
    model_cfg = cfg["model"]
    absolute_learned = bool(model_cfg.get("decoder_learned_pos")) and not model_cfg.get("no_token_positional_embeddings")
    num_updates = state["optimizer_history"][-1]["num_updates"]
    del state

    length = args.tokens_per_sample or train_length
    context = args.context_window if args.context_window >= 0 else length - length // 6
    if not 0 <= context < length:
        sys.exit(f"eval_lm_table.py: the context window ({context}) must be below the block length ({length})")
    args.max_tokens = args.max_tokens or 4 * length
    factors = [int(k) for k in args.extrapolate.replace(",", " ").split()]
    splits = [s for s in args.splits.replace(",", " ").split()]
    words_path = os.path.join(args.data, "words.json")
    words = {k: v["words"] for k, v in json.load(open(words_path)).items()} if os.path.exists(words_path) else {}
    unit = "SentencePiece" if os.path.exists(os.path.join(args.data, "spm.model")) else "words"

    rows = []
    for split in splits:
        rows.append(dict(split=split, kind="standard", name="non-overlapping", factor=1, tokens_per_sample=length, context_window=0))
        rows.append(dict(split=split, kind="sliding", name=f"sliding window", factor=1, tokens_per_sample=length, context_window=context))
        for k in factors:
            if k != 1:
                rows.append(dict(split=split, kind="extrapolation", name=f"non-overlapping, {k}L", factor=k,
                                 tokens_per_sample=k * length, context_window=0))
    params = None
    for row in rows:
        print(f"== {row['split']}: {row['name']} (--tokens-per-sample {row['tokens_per_sample']} "
              f"--context-window {row['context_window']})", flush=True)
        params = evaluate(args, row, train_length, absolute_learned, words) or params
        print(f"== {row['split']}: {row['name']}: {row['status']}"
              + (f", ppl per word {row['ppl_word']:.2f}" if row.get("ppl_word") else ""), flush=True)
    sweep = {"factors": factors, "ppl_word": {}}  # split -> factor -> ppl per word (None: not complete)
    for split in splits:
        sweep["ppl_word"][split] = {}
        for k in factors:
            row = next(r for r in rows if r["split"] == split and r["factor"] == k and r["kind"] != "sliding")
            sweep["ppl_word"][split][str(k)] = row.get("ppl_word") if row["status"] == "ok" else None

    report = {
        "model": {"run": args.run, "arch": model_cfg["_name"], "checkpoint": os.path.abspath(args.checkpoint),
                  "num_updates": num_updates, "params": params or 0, "train_tokens_per_sample": train_length},
        "data": os.path.abspath(args.data), "unit": unit, "splits": splits, "rows": rows, "extrapolation": sweep,
    }
    os.makedirs(args.out_dir, exist_ok=True)
    write_atomically(os.path.join(args.out_dir, "eval.json"), json.dumps(report, indent=1) + "\n")
    table = markdown(report)
    write_atomically(os.path.join(args.out_dir, "eval.md"), table)
    print(table)
    bad = [r for r in rows if r["kind"] != "extrapolation" and r["status"] != "ok"]
    if bad:
        sys.exit(f"eval_lm_table.py: {len(bad)} evaluation(s) at the training length did not complete: "
                 + "; ".join(f"{r['split']} {r['name']}: {r['status']}" for r in bad))


if __name__ == "__main__":
    main()
