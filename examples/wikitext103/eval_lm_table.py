"""Evaluate one run's checkpoint with fairseq-eval-lm in several settings and write the tables (eval.sh).

    python eval_lm_table.py --wt103-dir DIR --data DATA_BIN --arch ARCH ... [options]

The run is found by the name train.sh gives it (``run_identity.run_name``), or ``--run-name`` /
``--checkpoint``. For each split:

- ``standard``: non-overlapping blocks of the training length L, each scored from the start of its block;
- ``sliding``: fairseq's ``--context-window C`` (blocks of L - C new tokens, each after up to C tokens of
  context), ``--sample-break-mode none``;
- ``fairseq``: fairseq's protocol, the one behind Baevski & Auli's 18.7 (fairseq's
  examples/language_model/README.md at commit fb82ad1a51714de02b8a269bd4d6e9e29efeb15a: ``--sample-break-mode
  complete --context-window 2560 --max-tokens 3072 --softmax-batch 1024``): the same window, on blocks of
  whole lines;
- ``press``: Press et al.'s (ALiBi's) sliding window with stride 1, ``--context-window L - 1``: one scored
  token per window of L;
- ``extrapolation``: non-overlapping blocks of k x L tokens for each k of ``--extrapolate`` but 1 (6: ALiBi's
  512 -> 3072).

``--protocols`` picks among sliding, fairseq and press (the standard rows always run). With ``--smoke``, every
row scores the first lines of each split, up to ``--smoke-eval-tokens`` tokens (``sliced_data``), and says so.

Batches hold what training's did: ``--max-tokens`` (default: the checkpoint's training ``--max-tokens``)
counts the tokens of a forward, so a sliding batch is ``max_tokens // L`` windows of L tokens (fairseq's
eval-lm counts scored tokens: ``max_tokens // L x (L - C)``); a block longer than that is a batch of its
own. A batch that runs out of memory is tried once more at half the size (``oom_retry``).

Perplexity per word. fairseq-eval-lm reports the mean loss per scored token in base 2 (loss) over
``tokens`` scored tokens, so the split's total negative log-likelihood is NLL = loss * ln 2 * tokens
nats. With ``words`` from DATA_BIN/words.json (binarize.sh: whitespace-separated words plus one end of
line per line), ppl_word = exp(NLL / words) = 2 ** (loss * tokens / words). For word-level data
tokens == words and this is fairseq's own perplexity; for SentencePiece data it puts the subword
model on the same per-word scale. A row counts only if every token of the split was scored:
fairseq-eval-lm silently skips blocks longer than the model's maximum length, so a row whose token
count falls short is marked "incomplete" with no perplexity.

Writes eval.json and eval.md in the results folder (each atomically), with what defines the run, the
attention path its training log names and its training time. Exit status 1 if a row at the training
length (standard or sliding) failed or was incomplete; the fairseq-protocol and extrapolation rows are
reported and do not fail the run (a model with learned absolute positions cannot score blocks past L).
With ``--dry-run``, prints each row's fairseq-eval-lm command and evaluates nothing.
"""

import argparse
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)  # this repository's plugin, the one --user-dir names

# fairseq_cli.eval_lm first: it sets up logging as fairseq-eval-lm does (stdout, fairseq's format, INFO), which
# one of fairseq's own modules would otherwise do first (at DEBUG, to stderr).
from fairseq_cli import eval_lm  # isort: skip
from fairseq_urpe import checkpoint_file  # isort: skip
import torch
from fairseq import checkpoint_utils, options
import numpy as np
from fairseq.data.indexed_dataset import MMapIndexedDataset, MMapIndexedDatasetBuilder
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import OmegaConf

from oom_retry import with_one_retry_at_half
from output_tee import output_teed_to
from run_identity import arch_kind, data_folder, precision, run_name, tokens_per_update

from fairseq_urpe.fairseq_runs import evaluated_tokens, model_params

SCRIPT = "eval.sh"
SOFTMAX_BATCH = 1024  # fairseq's README
FAIRSEQ_CONTEXT = "fairseq's protocol (--sample-break-mode complete), as behind Baevski & Auli's 18.7"
PRESS_CONTEXT = ("Press et al.'s (ALiBi's) sliding window with stride 1 (--context-window L - 1, one scored token per "
                 "window of L), the evaluation of their WikiText-103 comparisons; their extrapolation goes from L = 512 "
                 "to 6L = 3,072 (the 6L row)")


def fail(message):
    print(f"{SCRIPT}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


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


def split_sizes(data, split):
    """Tokens of each line of a binarized split (its end of line included)."""
    dataset = MMapIndexedDataset(os.path.join(data, split))
    return dataset.sizes.copy()  # a copy: sizes is a view of the dataset's mmap


def sliced_data(data, splits, tokens, folder):
    """SMOKE's bounded evaluation: a data folder in ``folder`` whose splits hold the first lines of ``data``'s, as
    many as fit ``tokens`` (at least one), and ``{split: (lines kept, lines, tokens kept, tokens)}``."""
    os.symlink(os.path.join(os.path.abspath(data), "dict.txt"), os.path.join(folder, "dict.txt"))
    kept = {}
    for split in splits:
        dataset = MMapIndexedDataset(os.path.join(data, split))
        sizes = dataset.sizes
        lines = max(1, int(np.searchsorted(np.cumsum(sizes), tokens, side="right")))
        builder = MMapIndexedDatasetBuilder(os.path.join(folder, split + ".bin"), dtype=dataset._index.dtype)
        for i in range(min(lines, len(sizes))):
            builder.add_item(torch.from_numpy(np.array(dataset[i], dtype=np.int64)))
        builder.finalize(os.path.join(folder, split + ".idx"))
        kept[split] = (min(lines, len(sizes)), len(sizes), int(sizes[:lines].sum()), int(sizes.sum()))
    return kept


def eval_lm_argv(args, row, max_tokens):
    """fairseq-eval-lm's arguments for one row."""
    argv = [
        args.data, "--path", args.checkpoint, "--user-dir", os.path.join(REPO, "fairseq_urpe"),
        "--gen-subset", row["split"], "--sample-break-mode", row["break_mode"],
        "--tokens-per-sample", str(row["tokens_per_sample"]), "--context-window", str(row["context_window"]),
        "--max-tokens", str(max_tokens), "--softmax-batch", str(SOFTMAX_BATCH), "--num-workers", "0",
        "--distributed-world-size", "1", "--log-format", "simple", "--log-interval", "1000000", "--seed", "1",
    ]
    if row.get("max_target_positions"):
        # fairseq's models report max_target_positions (the training length) as their maximum length
        # whatever their positions can do; sinusoidal and relative positions extend, so raise it.
        # Learned absolute positions cannot: left as is, their longer blocks are skipped (incomplete).
        argv += ["--model-overrides", repr({"max_target_positions": row["max_target_positions"]})]
    if args.cpu:
        argv.append("--cpu")
    if args.fp16:
        argv.append("--fp16")
    return argv


def run_eval_lm(argv, trust_code=None):
    """fairseq-eval-lm's own main() on ``argv``, in this process: (loss base 2, tokens scored, parameters).
    Its checkpoint is read as data (``TRUST_CHECKPOINT_CODE=1`` to load one that needs code)."""
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_eval_lm_parser(), input_args=argv))
    capture = Capture()
    logger = logging.getLogger("fairseq_cli.eval_lm")
    logger.addHandler(capture)
    try:
        with checkpoint_file.checkpoint_loading(cfg.common_eval.path, trust_code):  # fairseq's loader, by the same rules
            result = eval_lm.main(cfg)
    finally:
        logger.removeHandler(capture)
    return float(result["loss"]), evaluated_tokens(capture.text), model_params(capture.text)


def free_memory():
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def evaluate(args, row, words):
    start = time.time()
    try:
        (loss, tokens, params), row["max_tokens"] = with_one_retry_at_half(
            lambda max_tokens: run_eval_lm(eval_lm_argv(args, row, max_tokens)), row["max_tokens"], row["unit"],
            row["floor"], free_memory)
    except Exception as error:  # one setting failing must not lose the others
        traceback.print_exc()
        row.update(status=f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}")
        return None
    finally:
        row["seconds"] = round(time.time() - start, 1)
        free_memory()
    row["tokens"] = tokens
    if tokens != row["split_tokens"]:
        row["status"] = (f"incomplete: {tokens} of {row['split_tokens']} tokens scored (fairseq-eval-lm skips blocks "
                         f"longer than the model's maximum length)")
        return params
    row["loss_base2"] = loss
    row["ppl_token"] = 2 ** loss
    if row["words"]:
        row["ppl_word"] = 2 ** (loss * tokens / row["words"])
    row["status"] = "ok"
    return params


def make_rows(args, length, train_max_tokens, extends, sizes):
    """The settings evaluated, per split (module doc), each with its batch: ``max_tokens`` scored tokens,
    in whole ``unit``s (the tokens one window or block scores), never below ``floor`` (the largest item)."""
    context = args.context_window if args.context_window >= 0 else length - length // 6
    if not 0 <= context < length:
        fail(f"the context window ({context}) must be below the block length ({length})")
    windows = max(1, args.max_tokens // length) if args.max_tokens else max(1, train_max_tokens // length)
    rows = []
    for split in args.splits:
        longest = int(sizes[split].max())
        common = dict(split=split, split_tokens=int(sizes[split].sum()), words=args.words.get(split))
        rows.append(dict(common, kind="standard", name="non-overlapping", factor=1, tokens_per_sample=length,
                         context_window=0, break_mode="none", unit=length, floor=length, max_tokens=windows * length))
        if "sliding" in args.protocols:
            rows.append(dict(common, kind="sliding", name="sliding window", factor=1, tokens_per_sample=length,
                             context_window=context, break_mode="none", unit=length - context, floor=length - context,
                             max_tokens=windows * (length - context)))
        if "fairseq" in args.protocols:
            rows.append(dict(common, kind="fairseq", name="fairseq protocol: sliding window, --sample-break-mode complete",
                             factor=1, tokens_per_sample=length, context_window=context, break_mode="complete",
                             unit=length - context, floor=max(length - context, longest),
                             max_tokens=max(windows * (length - context), longest),
                             max_target_positions=longest if longest > length and extends else None))
        if "press" in args.protocols:
            rows.append(dict(common, kind="press", name="Press et al.'s protocol: sliding window, stride 1", factor=1,
                             tokens_per_sample=length, context_window=length - 1, break_mode="none", unit=1, floor=1,
                             max_tokens=windows))
        for k in args.extrapolate:
            if k != 1:
                rows.append(dict(common, kind="extrapolation", name=f"non-overlapping, {k}L", factor=k,
                                 tokens_per_sample=k * length, context_window=0, break_mode="none", unit=k * length,
                                 floor=k * length, max_tokens=max(windows, k) * length,
                                 max_target_positions=k * length if extends else None))
    return rows


def fmt(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown(report):
    head = report["model"]
    lines = [
        f"# {head['run']}: {head['arch']}",
        "",
        f"checkpoint `{head['checkpoint']}` ({head['num_updates']} updates, {head['params']:,} parameters), "
        f"trained on blocks of L = {head['train_tokens_per_sample']} tokens, {head['tokens_per_update']:,} tokens per "
        f"update, attention path: {head['attention_path']}; "
        f"data `{report['data']}` ({report['unit']}). Perplexity per word: 2 ** (loss_base2 * tokens / words).",
        "",
        "| split | evaluation | block | context | --max-tokens | tokens scored | ppl per word | ppl per token | status |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['split']} | {row['name']} | {row['tokens_per_sample']} | {row['context_window']} | "
            f"{row['max_tokens']} | {row.get('tokens') if row.get('tokens') is not None else 'n/a'} | "
            f"{fmt(row.get('ppl_word'))} | {fmt(row.get('ppl_token'))} | {row['status']} |"
        )
    sweep = report["extrapolation"]
    if sweep["factors"]:
        length = head["train_tokens_per_sample"]
        lines += ["", "Extrapolation: non-overlapping blocks of k x L tokens (1L is the first row), perplexity per word:", "",
                  "| split | " + " | ".join(f"{k}L = {k * length}" for k in sweep["factors"]) + " |",
                  "|---|" + "---:|" * len(sweep["factors"])]
        for split in report["splits"]:
            lines.append(f"| {split} | " + " | ".join(fmt(sweep["ppl_word"][split][str(k)]) for k in sweep["factors"]) + " |")
    lines += ["", f"The fairseq-protocol row is {FAIRSEQ_CONTEXT}; the Press et al. row is {PRESS_CONTEXT}. Each row "
              f"batches by this run's training --max-tokens."]
    if report.get("smoke_slice"):
        lines += ["", "SMOKE: each evaluation scores the first lines of its split only: "
                  + "; ".join(f"{split}, {k['tokens']:,} of {k['of_tokens']:,} tokens ({k['lines']:,} of {k['of_lines']:,} "
                              f"lines)" for split, k in report["smoke_slice"].items())
                  + ". A check that the evaluation runs, not a result."]
    return "\n".join(lines) + "\n"


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def attention_path(train_log, plugin):
    """The distinct ``attention path: ...`` lines of the run's training log (the plugin logs each once per process)."""
    if not plugin:
        return "fairseq's own attention"
    if not os.path.exists(train_log):
        return f"unknown (no {train_log})"
    found = []
    with open(train_log, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "attention path: " in line:
                path = line.split("attention path: ", 1)[1].strip()
                if path not in found:
                    found.append(path)
    return "; ".join(found) or f"not named in {train_log}"


def read_checkpoint(path, trust_code=None):
    """(cfg as a plain dict, num_updates, seconds of training) of a checkpoint, read as data
    (:mod:`fairseq_urpe.checkpoint_file`: weights-only, its weights memory-mapped where its layout allows).
    Checkpoints of older fairseq versions hold their arguments as an ``argparse.Namespace`` (``args``), which
    that allows; fairseq upgrades them to a ``cfg``. A file that needs code to load is refused naming
    ``TRUST_CHECKPOINT_CODE``, before anything is evaluated (also under DRY_RUN)."""
    state = checkpoint_file.read_checkpoint(path, trust_code)
    if state.get("cfg") is None:
        with checkpoint_file.checkpoint_loading(path, trust_code):
            state = checkpoint_utils.load_checkpoint_to_cpu(path)  # upgrades args to cfg
    cfg = state["cfg"]
    if not isinstance(cfg, dict):
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    history = state.get("optimizer_history") or [{}]
    return cfg, history[-1].get("num_updates"), (state.get("extra_state") or {}).get("previous_training_time")


def find_precision(args, name):
    """The PRECISION of the run when it is not given: the one of fp16 and fp32 whose run folder exists (the
    machine that evaluates need not be the one that trained). Both: refused, naming them; neither: fp32 on CPU."""
    if args.run_name or args.checkpoint or args.save_dir:
        return "fp32" if args.cpu else "fp16"  # the name is not looked for
    found = [p for p in ("fp16", "fp32")
             if os.path.isdir(args.save_dir or os.path.join(args.wt103_dir, "checkpoints", name(p)))]
    if len(found) > 1:
        fail(f"both {name('fp16')} and {name('fp32')} are trained: set PRECISION=fp16 or fp32")
    return found[0] if found else ("fp32" if args.cpu else "fp16")


def parse_options(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    identity = parser.add_argument_group("which run (as train.sh names it)")
    for name in ("--arch", "--rpe-init", "--bpe", "--wt103-dir", "--data", "--log-dir"):
        identity.add_argument(name, required=True)
    identity.add_argument("--precision", default="", help="fp16 or fp32; empty: whichever of the two runs exists")
    identity.add_argument("--seed", type=int, required=True)
    identity.add_argument("--tokens-per-sample", type=int, required=True, help="the run's training length L")
    identity.add_argument("--batch-tokens", type=int, default=73728, help="the run's tokens per update")
    identity.add_argument("--vocab", type=int, required=True)
    identity.add_argument("--smoke", type=int, default=0)
    identity.add_argument("--run-name", default="")
    identity.add_argument("--save-dir", default="")
    identity.add_argument("--checkpoint", default="", help="default: checkpoint_best.pt, else checkpoint_last.pt")
    identity.add_argument("--results-dir", default="")
    parser.add_argument("--splits", default="valid,test")
    parser.add_argument("--context-window", type=int, default=-1, help="-1: L - L // 6 (2560 for L = 3072)")
    parser.add_argument("--protocols", default="sliding,fairseq,press",
                        help="rows besides the non-overlapping ones: sliding, fairseq, press (module doc)")
    parser.add_argument("--extrapolate", default="1,2,4,6", help="factors k of the k x L sweep")
    parser.add_argument("--smoke-eval-tokens", type=int, default=8192,
                        help="with --smoke: score the first lines of each split, up to this many tokens")
    parser.add_argument("--max-tokens", type=int, default=0, help="tokens per forward; 0: training's --max-tokens")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="print the fairseq-eval-lm commands, evaluate nothing")
    args = parser.parse_args(argv)
    args.extrapolate = [int(k) for k in args.extrapolate.replace(",", " ").split()]
    args.splits = args.splits.replace(",", " ").split()
    args.protocols = args.protocols.replace(",", " ").split()
    unknown = sorted(set(args.protocols) - {"sliding", "fairseq", "press"})
    if unknown:
        fail(f"PROTOCOLS: unknown {' '.join(unknown)}; the rows are sliding, fairseq and press (non-overlapping always)")
    return args


def main(argv=None):
    """eval.sh's Python side on ``argv`` (default: the command line)."""
    args = parse_options(argv)
    kind = arch_kind(args.arch)
    if kind is None and not args.checkpoint:
        fail(f"unknown ARCH={args.arch}: no such --arch in fairseq or the plugin")
    learns = kind is not None and kind["learns_from_rpe_init"]

    def name(precision_name):
        return args.run_name or run_name(args.arch, args.tokens_per_sample, args.batch_tokens,
                                         args.rpe_init if learns else None, args.seed, args.bpe, args.vocab,
                                         precision_name, bool(args.smoke))

    run = name(args.precision or find_precision(args, name))
    save_dir = args.save_dir or os.path.join(args.wt103_dir, "checkpoints", run)
    if not args.checkpoint:
        args.checkpoint = os.path.join(save_dir, "checkpoint_best.pt")
        if not os.path.exists(args.checkpoint):
            args.checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    results = args.results_dir or os.path.join(args.wt103_dir, "results", run)
    print(f"== run: {run} (checkpoint {args.checkpoint}, results {results})", flush=True)
    for split in args.splits:
        if not os.path.exists(os.path.join(args.data, split + ".bin")):
            fail(f"no split '{split}' in {args.data} (SPLITS={' '.join(args.splits)})")
    words_path = os.path.join(args.data, "words.json")
    args.words = {k: v["words"] for k, v in json.load(open(words_path)).items()} if os.path.exists(words_path) else {}

    if os.path.exists(args.checkpoint):
        cfg, num_updates, train_seconds = read_checkpoint(args.checkpoint)
        length, train_max_tokens = cfg["task"]["tokens_per_sample"], cfg["dataset"]["max_tokens"]
    elif args.dry_run:
        print(f"== no {args.checkpoint} yet: L = TOKENS_PER_SAMPLE = {args.tokens_per_sample} and training's "
              f"--max-tokens = MAX_TOKENS or L", flush=True)
        cfg, num_updates, train_seconds = None, None, None
        length, train_max_tokens = args.tokens_per_sample, args.max_tokens or args.tokens_per_sample
    else:
        fail(f"no checkpoint {args.checkpoint}: train first (train.sh with the same knobs), or set CHECKPOINT")
    model_cfg = cfg["model"] if cfg else {}
    absolute_learned = bool(model_cfg.get("decoder_learned_pos")) and not model_cfg.get("no_token_positional_embeddings")
    args.full_data, args.slice, slice_dir = args.data, None, None
    try:
        if args.smoke:
            slice_dir = tempfile.mkdtemp(prefix="smoke-eval-")
            args.slice = sliced_data(args.data, args.splits, args.smoke_eval_tokens, slice_dir)
            args.data = slice_dir
            word_level = not os.path.exists(os.path.join(args.full_data, "spm.model"))
            for split, (lines, all_lines, tokens, all_tokens) in args.slice.items():
                print(f"== SMOKE=1: {split}: each evaluation scores the first {tokens:,} of its {all_tokens:,} tokens "
                      f"({lines:,} of {all_lines:,} lines; SMOKE_EVAL_TOKENS={args.smoke_eval_tokens})"
                      + ("" if tokens < all_tokens else ": the whole split"), flush=True)
                if tokens < all_tokens:  # per word: the slice's words, known at word level (one token a word)
                    args.words[split] = tokens if word_level else None
        sizes = {split: split_sizes(args.data, split) for split in args.splits}
        rows = make_rows(args, length, train_max_tokens, not absolute_learned, sizes)
        for row in rows:
            print(f"== {row['split']}: {row['name']}: fairseq-eval-lm "
                  f"{shlex.join(eval_lm_argv(args, row, row['max_tokens']))}", flush=True)
        if args.dry_run:
            print("== DRY_RUN=1: not evaluating", flush=True)
            return

        os.makedirs(args.log_dir, exist_ok=True)
        with output_teed_to(os.path.join(args.log_dir, f"eval-{run}.log")):
            print(f"== {SCRIPT} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: {args.checkpoint}", flush=True)
            evaluate_all(args, run, rows, cfg, num_updates, train_seconds, length, results)
    finally:
        if slice_dir:
            shutil.rmtree(slice_dir, ignore_errors=True)


def evaluate_all(args, run, rows, cfg, num_updates, train_seconds, length, results):
    params = None
    for row in rows:
        print(f"== {row['split']}: {row['name']} (--tokens-per-sample {row['tokens_per_sample']} --context-window "
              f"{row['context_window']} --sample-break-mode {row['break_mode']} --max-tokens {row['max_tokens']})",
              flush=True)
        params = evaluate(args, row, args.words) or params
        print(f"== {row['split']}: {row['name']}: {row['status']}"
              + (f", ppl per word {row['ppl_word']:.2f}" if row.get("ppl_word") else ""), flush=True)
    sweep = {"factors": args.extrapolate, "ppl_word": {}}  # split -> factor -> ppl per word (None: not complete)
    for split in args.splits:
        sweep["ppl_word"][split] = {}
        for k in args.extrapolate:
            row = next(r for r in rows if r["split"] == split and r["factor"] == k and r["kind"] in ("standard", "extrapolation"))
            sweep["ppl_word"][split][str(k)] = row.get("ppl_word") if row["status"] == "ok" else None

    model_cfg, arch = cfg["model"], cfg["model"]["_name"]
    kind = arch_kind(arch)
    plugin = kind is not None and kind["plugin"]
    train_log = os.path.join(args.log_dir, f"train-{run}.log")
    report = {
        "model": {"run": run, "arch": arch, "checkpoint": os.path.abspath(args.checkpoint), "num_updates": num_updates,
                  "params": params or 0, "train_tokens_per_sample": length, "train_max_tokens": cfg["dataset"]["max_tokens"],
                  "tokens_per_update": tokens_per_update(cfg),
                  "rpe_init": model_cfg.get("rpe_init") if kind is not None and kind["learns_from_rpe_init"] else None,
                  "seed": cfg["common"]["seed"], "data_bin": data_folder(cfg), "precision": precision(cfg["common"]),
                  "attention_path": attention_path(train_log, plugin), "train_seconds": train_seconds},
        "data": os.path.abspath(args.full_data),
        "unit": "SentencePiece" if os.path.exists(os.path.join(args.full_data, "spm.model")) else "words",
        "smoke_slice": ({split: {"lines": k[0], "of_lines": k[1], "tokens": k[2], "of_tokens": k[3]}
                         for split, k in args.slice.items()} if args.slice else None),
        "splits": args.splits, "rows": rows, "extrapolation": sweep,
    }
    os.makedirs(results, exist_ok=True)
    write_atomically(os.path.join(results, "eval.json"), json.dumps(report, indent=1) + "\n")
    table = markdown(report)
    write_atomically(os.path.join(results, "eval.md"), table)
    print(table)
    print(f"== wrote {results}/eval.md and eval.json", flush=True)
    bad = [r for r in rows if r["kind"] in ("standard", "sliding") and r["status"] != "ok"]
    if bad:
        fail(f"{len(bad)} evaluation(s) at the training length did not complete: "
             + "; ".join(f"{r['split']} {r['name']}: {r['status']}" for r in bad))


if __name__ == "__main__":
    main()
