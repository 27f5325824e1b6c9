"""The Python side of train.sh: check a training against fairseq and its saved run, then start it.

    python launch_training.py [options] -- FAIRSEQ_TRAIN_ARGUMENTS...

One process, fairseq imported once. It derives ``--update-freq`` (BATCH_TOKENS / (--max-tokens x devices),
unless UPDATE_FREQ gives it), adds ``--rpe-init`` (archs whose position kind learns a bias from it),
``--urpe-attention-impl`` (the plugin's archs) and ``--distributed-world-size`` (always: fairseq's default is
this machine's GPU count, not the run's), names the run (``run_identity.run_name``), parses the whole
command with fairseq-train's own parser, and refuses what fairseq would accept but a GPU node cannot run
or the data cannot feed: ``--tpu`` (fairseq's options.py sets it for ``--bf16``), an arch without the
adaptive softmax that ``--criterion adaptive_loss`` needs, adaptive cutoffs beyond the dictionary, and a
batch other than BATCH_TOKENS (the tokens per update fairseq parses, EXTRA_ARGS included; the refusal says
what keeps BATCH_TOKENS). Then the run's folder: a lock (``run_lock``: one training per folder and node);
the saved run, if any, made the newest intact checkpoint (``checkpoint_last_intact.py``); a run saved with
other settings is refused, each difference named (``run_identity.differences``: world size and
``--update-freq`` are not among them); a run whose ``checkpoint_last.pt`` is at ``--max-update`` is
finished, and the script exits 0 without touching it (fairseq would take one more update before it checks
``max_update``, and with ``--t-mult 2`` the cosine schedule restarts there); a disk without room for the
run's checkpoints is refused. With ``--dry-run`` it stops after the checks, having written nothing.
Otherwise its output also goes to the log (``tee -a``; node R > 0: a log of its own), and it trains: in
this process (one device), as CPU ranks over gloo (``--cpu-procs`` > 1; if one fails, the others are
stopped), or under torchrun (GPUs). SIGTERM stops torchrun or the ranks before this process exits.
"""

import argparse
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)  # this repository's plugin, the one train.sh's --user-dir names

# fairseq_cli.train first: it sets up logging as fairseq-train does (stdout, fairseq's format, INFO), which
# one of fairseq's own modules would otherwise do first (at DEBUG, to stderr).
import fairseq_cli.train  # isort: skip
import torch
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.distributed import utils as distributed_utils
from fairseq.models import ARCH_MODEL_REGISTRY
from omegaconf import OmegaConf

import run_lock
from checkpoint_last_intact import main as make_checkpoint_last_intact
from checkpoint_last_intact import newest_intact, read_state
from output_tee import output_teed_to
from run_identity import arch_kind, batch_layouts, differences, language_model_archs, learns_from_rpe_init, precision, run_name

import fairseq_urpe  # noqa: F401  (registers the plugin's archs, from REPO)

SCRIPT = "train.sh"


def fail(message):
    print(f"{SCRIPT}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def note(message):
    print(f"== {message}", flush=True)


def parse_options(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="the environment's bin folder (fairseq-train, torchrun)")
    parser.add_argument("--rpe-init", required=True)
    parser.add_argument("--attention-impl", required=True)
    parser.add_argument("--run-name", default="")
    parser.add_argument("--save-dir", default="")
    parser.add_argument("--tensorboard-dir", default="")
    parser.add_argument("--wt103-dir", required=True)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--bpe", required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--smoke", type=int, default=0)
    parser.add_argument("--dry-run", type=int, default=0)
    parser.add_argument("--cpu-procs", type=int, default=0)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", default="auto")
    parser.add_argument("--batch-tokens", type=int, required=True, help="BATCH_TOKENS: tokens per update")
    parser.add_argument("--reference-batch-tokens", type=int, default=0, help="the recipe's reference batch")
    parser.add_argument("--update-freq", default="", help="UPDATE_FREQ; empty: derived from BATCH_TOKENS")
    parser.add_argument("fairseq_args", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    if opts.fairseq_args[:1] == ["--"]:
        opts.fairseq_args = opts.fairseq_args[1:]
    return opts


def parse_fairseq(argv):
    """fairseq-train's own parsing of ``argv`` (the arch's defaults applied), as a Namespace; a command its
    parser refuses (a ValueError there) fails naming why."""
    try:
        return options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    except ValueError as error:
        why = ""
        if "--bf16" in argv:
            why = (": EXTRA_ARGS' --bf16 turns on --tpu in fairseq 0.12.3.1 (options.py), which it cannot combine with "
                   "--fp16 either; bf16 has no GPU route here, use PRECISION=fp16 or fp32")
        fail(f"fairseq-train's parser refuses the command ({error}){why}")


def plain_config(args):
    """The config fairseq-train makes of ``args``, as the plain dict a checkpoint stores (``cfg``)."""
    return OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True, enum_to_str=True)


def dictionary_size(data):
    """Symbols of fairseq's dictionary of ``data``: dict.txt's entries and the 4 special symbols."""
    with open(os.path.join(data, "dict.txt"), encoding="utf-8") as f:
        return sum(1 for _ in f) + 4


def check_for_a_gpu_node(args):
    if args.tpu:
        fail("the command turns on --tpu (fairseq's options.py sets it for --bf16/--memory-efficient-bf16), and "
             "fairseq-train then asks torch_xla for a TPU device; on GPUs use PRECISION=fp16 or fp32")
    if args.criterion == "adaptive_loss" and not getattr(args, "adaptive_softmax_cutoff", None):
        fail(f"--arch {args.arch} has no adaptive softmax (no --adaptive-softmax-cutoff), which the recipe's --criterion "
             f"adaptive_loss needs (fairseq asserts it at the first step): use a *_wiki103 arch (cutoffs 20000,60000), "
             f"BPE=sentencepiece (cutoffs from its dictionary), or EXTRA_ARGS='--adaptive-softmax-cutoff A,B'")
    vocab = dictionary_size(args.data)
    for option, in_use in (("adaptive_input_cutoff", getattr(args, "adaptive_input", False)),
                           ("adaptive_softmax_cutoff", True)):
        value = getattr(args, option, None)
        if in_use and value:
            cutoffs = [int(c) for c in str(value).split(",")]
            if cutoffs != sorted(set(cutoffs)) or cutoffs[-1] > vocab:
                fail(f"--{option.replace('_', '-')} {value} does not fit the dictionary of {args.data} ({vocab} "
                     f"symbols): cutoffs must increase and end at most at the dictionary's size (fairseq asserts it "
                     f"when it builds the model)")


def position_flags(opts, args):
    """The flags the plugin's archs get (and a note of where the run's bias starts)."""
    if not hasattr(args, "rpe_kind"):
        note(f"bias start: {args.arch} is fairseq's own arch, without a relative bias; RPE_INIT does not apply")
        if opts.attention_impl != "auto":
            note(f"ATTENTION_IMPL={opts.attention_impl} applies to the plugin's archs; {args.arch} runs fairseq's "
                 f"own attention")
        return []
    kind = str(args.rpe_kind)
    flags = ["--urpe-attention-impl", opts.attention_impl]
    if not learns_from_rpe_init(kind):
        note(f"bias start: {args.arch} (--rpe-kind {kind}) has no learned bias b; RPE_INIT={opts.rpe_init} changes nothing")
        return flags
    start = ("on ALiBi's line -m_h|k| (RPE_INIT=alibi, --rpe-init alibi)" if opts.rpe_init == "alibi"
             else "flat, b = 0 (RPE_INIT=zero, --rpe-init zero)")
    note(f"bias start: {args.arch} (--rpe-kind {kind}) learns its bias b, started {start}")
    return flags + ["--rpe-init", opts.rpe_init]


def saved_run(dry_run, save_dir, config):
    """Check the run saved in ``save_dir`` against ``config``: ``(updates, training seconds)`` of its
    checkpoint_last.pt, or None when there is none to resume."""
    last = os.path.join(save_dir, "checkpoint_last.pt")
    if not os.path.exists(last):
        return None
    if dry_run:
        newest = newest_intact(save_dir)
        if newest != last:
            note(f"{last} is truncated or older than {newest}; without DRY_RUN the run resumes from the newest intact "
                 f"checkpoint" if newest else f"{last} is truncated and no intact checkpoint is there to replace it")
            if newest is None:
                return None
            last = newest
    elif make_checkpoint_last_intact(save_dir) != 0:
        fail(f"cannot resume from {save_dir} (see above)")
    state = read_state(last)
    if state is None:
        fail(f"cannot read {last}")
    found = differences(state["cfg"], config)
    if found:
        fail(f"{last} holds a run with other settings; refusing to resume it with these: "
             + "; ".join(f"{name}: saved {saved!r}, now {now!r}" for name, saved, now in found)
             + ". Rerun with the saved settings, or give the new run its own RUN_NAME or SAVE_DIR.")
    return state["optimizer_history"][-1]["num_updates"], state.get("extra_state", {}).get("previous_training_time")


def how_to_keep(batch_tokens, world, length, max_tokens):
    """What keeps ``batch_tokens`` per update on ``world`` devices, for a refusal."""
    layouts = batch_layouts(batch_tokens, world, length, max_tokens)
    if layouts:
        size, freq = layouts[0]
        way = (f"MAX_TOKENS={size} (and no UPDATE_FREQ) keeps {batch_tokens:,} tokens per update on {world} device(s): "
               f"{size // length} block(s) of L = {length} per device, --update-freq {freq}")
    else:
        way = (f"No batch of whole blocks of L = {length} per device makes {batch_tokens:,} tokens per update on "
               f"{world} device(s): use a device count that divides {batch_tokens // length} (the blocks of an update)")
    return (f"{way}. To train off this batch, set BATCH_TOKENS to the tokens per update you want (the run's name "
            f"carries it).")


def update_freq(opts, args, world):
    """``--update-freq`` of the run: UPDATE_FREQ, or BATCH_TOKENS / (--max-tokens x devices) when that is whole."""
    if opts.update_freq:
        return int(opts.update_freq)
    per_step = args.max_tokens * world
    if opts.batch_tokens % per_step or opts.batch_tokens < per_step:
        fail(f"BATCH_TOKENS={opts.batch_tokens} tokens per update is not a whole number of batches of "
             f"--max-tokens {args.max_tokens} (MAX_TOKENS, or EXTRA_ARGS) on {world} device(s) ({per_step} tokens per "
             f"step). "
             + how_to_keep(opts.batch_tokens, world, args.tokens_per_sample, args.max_tokens))
    return opts.batch_tokens // per_step


def check_batch(opts, args, world, device):
    """The tokens per update fairseq parsed (after EXTRA_ARGS) must be BATCH_TOKENS; returns them."""
    freq = args.update_freq[0]
    tokens = args.max_tokens * args.distributed_world_size * freq
    note(f"{device}, --max-tokens {args.max_tokens} --update-freq {freq}: {tokens} tokens per update "
         f"(fairseq's parse of the command)")
    if len(set(args.update_freq)) > 1:
        fail(f"--update-freq {','.join(map(str, args.update_freq))} changes the batch between epochs; give one value")
    if tokens != opts.batch_tokens:
        fail(f"fairseq parses {tokens:,} tokens per update (--max-tokens {args.max_tokens} x "
             f"{args.distributed_world_size} device(s) x --update-freq {freq}, EXTRA_ARGS and UPDATE_FREQ included), "
             f"not BATCH_TOKENS={opts.batch_tokens:,}. "
             + how_to_keep(opts.batch_tokens, args.distributed_world_size, args.tokens_per_sample, args.max_tokens))
    if opts.reference_batch_tokens and tokens != opts.reference_batch_tokens:
        note(f"BATCH_TOKENS={tokens} is not the reference {opts.reference_batch_tokens:,} tokens per update: results "
             f"are not comparable with the reference batch's; the run's name says batch{tokens}")
    return tokens


def estimated_parameters(args):
    """The model's parameters from its sizes (an estimate, within a few per cent for the recipe's archs): the
    layers' ``layers (4 d^2 + 2 d ffn)`` and the embedding, adaptive (band i of the dictionary at width
    ``d / factor^i``, projected to ``d``) or one ``vocab x d`` table; the adaptive softmax once more unless tied."""
    width, vocab = args.decoder_embed_dim, dictionary_size(args.data)

    def bands(cutoffs, factor):
        edges = [int(c) for c in str(cutoffs).split(",")] + [vocab] if cutoffs else [vocab]
        total, start = 0, 0
        for i, end in enumerate(edges):
            dim = max(1, int(width // factor ** i))
            total, start = total + (end - start) * dim + (dim * width if i else 0), end
        return total

    adaptive_input = getattr(args, "adaptive_input", False)
    embedding = (bands(args.adaptive_input_cutoff, args.adaptive_input_factor) if adaptive_input else vocab * width)
    tied = getattr(args, "tie_adaptive_weights", False) or getattr(args, "share_decoder_input_output_embed", False)
    softmax = 0 if tied else bands(getattr(args, "adaptive_softmax_cutoff", None), getattr(args, "adaptive_softmax_factor", 4))
    layers = args.decoder_layers * (4 * width * width + 2 * width * args.decoder_ffn_embed_dim)
    return layers + embedding + softmax


def checkpoint_bytes(save_dir, args):
    """Size of one checkpoint of the run: its checkpoint_last.pt's, else an estimate from the model's sizes:
    fp16 weights (fp32 without --fp16) and NAG's fp32 momentum."""
    last = os.path.join(save_dir, "checkpoint_last.pt")
    if os.path.exists(last):
        return os.path.getsize(last), f"the size of {last}"
    params = estimated_parameters(args)
    per_param = (2 if args.fp16 else 4) + 4
    return params * per_param, f"about {params / 1e6:,.1f}M parameters x {per_param} bytes (weights and momentum)"


def check_free_space(save_dir, args):
    """Refuse to start when the disk under ``save_dir`` cannot hold the run's checkpoints: fairseq copies each
    save onto checkpoint_last.pt, and a copy that meets a full disk truncates the good file it replaces."""
    size, why = checkpoint_bytes(save_dir, args)
    keep = args.keep_interval_updates if args.keep_interval_updates >= 0 else None
    files = (keep if keep is not None else 1) + 3  # interval files, best, last and the next save's new file
    present = 0
    if os.path.isdir(save_dir):
        present = sum(os.path.getsize(os.path.join(save_dir, n)) for n in os.listdir(save_dir)
                      if n.startswith("checkpoint") and n.endswith(".pt"))
    need = max(files * size - present, 2 * size)
    where = save_dir
    while not os.path.exists(where):
        where = os.path.dirname(where)
    free = shutil.disk_usage(where).free
    note(f"disk: {free / 1e9:,.1f} GB free under {where}; the run's checkpoints need {need / 1e9:,.2f} GB more "
         f"({files} files of {size / 1e9:,.2f} GB, {why}, less {present / 1e9:,.2f} GB there already)"
         + ("" if keep is not None else "; KEEP_INTERVAL_UPDATES=-1 keeps every interval file, which this does not count"))
    if free < need:
        fail(f"not enough disk for the run's checkpoints: {free / 1e9:,.2f} GB free under {where}, {need / 1e9:,.2f} GB "
             f"needed (above); a full disk truncates checkpoint_last.pt while fairseq copies a save onto it. Free "
             f"space there, lower KEEP_INTERVAL_UPDATES, or set SAVE_DIR (or WT103_DIR) on a larger disk.")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_here(argv):
    """fairseq-train's cli_main on ``argv``, in this process."""
    distributed_utils.call_main(convert_namespace_to_omegaconf(parse_fairseq(argv)), fairseq_cli.train.main)


CHILDREN = []  # the processes this launcher started (torchrun, CPU ranks): stopped with it


def stop_children(*_):
    """SIGTERM to every child still running, then wait for each (SIGKILL after 60 s)."""
    for process in CHILDREN:
        if process.poll() is None:
            process.terminate()
    for process in CHILDREN:
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def on_sigterm(signum, _frame):
    """SIGTERM to train.sh (this process, which it exec'd): SIGTERM to torchrun and the ranks, then exit; main's
    ``finally`` waits for them (not here: the handler may interrupt a ``wait`` on one of them, which holds its lock).
    The note may find no reader: a SIGTERM to the process group stops the log's ``tee`` too, and the write's
    BrokenPipeError, raised here instead of SystemExit, would be swallowed where it lands in a logging call
    (logging catches an Exception in a handler), and the training would run on."""
    try:
        print(f"== {SCRIPT}: signal {signum}: stopping the training processes", file=sys.stderr, flush=True)
    except OSError:
        pass
    for process in CHILDREN:
        if process.poll() is None:
            process.terminate()
    raise SystemExit(128 + signum)


def train_cpu_ranks(command, procs, log_dir, run):
    """One fairseq-train per rank (rank 0's output here, rank R's in train-<run>.rankR.log); if a rank
    fails the others are stopped, since they would wait for it forever in the next all-reduce."""
    logs = [None]
    for rank in range(procs):
        out = None
        if rank:
            logs.append(os.path.join(log_dir, f"train-{run}.rank{rank}.log"))
            out = open(logs[rank], "a")
            out.write(f"== {SCRIPT} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: rank {rank}\n")
            out.flush()
        CHILDREN.append(subprocess.Popen(command + ["--distributed-rank", str(rank)], stdout=out,
                                         stderr=subprocess.STDOUT if out else None))
    ranks = CHILDREN[-procs:]
    failed, running = None, set(range(procs))
    while running and failed is None:
        time.sleep(1)
        for rank in sorted(running):
            code = ranks[rank].poll()
            if code is not None:
                running.discard(rank)
                if code == 0:
                    note(f"rank {rank} finished")
                else:
                    failed = f"rank {rank} (exit code {code}; log {logs[rank] or 'above'})"
    stop_children()
    if failed:
        fail(f"fairseq-train failed on {failed}; the other ranks were stopped")


def train_torchrun(command):
    """torchrun (this node's ranks); its exit status."""
    CHILDREN.append(subprocess.Popen(command))
    return CHILDREN[-1].wait()


def device_text(opts):
    return f"CPU, {opts.cpu_procs} process(es)" if opts.cpu_procs else f"{opts.gpus} GPU(s) x {opts.nnodes} node(s)"


def main(argv=None):
    """train.sh's Python side on ``argv`` (default: the command line); returns the exit status."""
    opts = parse_options(argv)
    base = opts.fairseq_args
    arch = base[base.index("--arch") + 1]
    if arch not in ARCH_MODEL_REGISTRY:
        fail(f"unknown ARCH={arch}: fairseq-train (with --user-dir fairseq_urpe) has no such --arch. "
             f"Language-model archs: {' '.join(language_model_archs())}")
    world = max(1, opts.cpu_procs or opts.gpus * opts.nnodes)
    args = parse_fairseq(base)
    # --update-freq right after the data folder, so that one in EXTRA_ARGS (later) is what fairseq keeps.
    base = base[:1] + ["--update-freq", str(update_freq(opts, args, world))] + base[1:]
    flags = position_flags(opts, args)
    learns = arch_kind(arch)["learns_from_rpe_init"]  # the name eval.sh derives too, from the arch alone
    run = opts.run_name or run_name(arch, args.tokens_per_sample, opts.batch_tokens, opts.rpe_init if learns else None,
                                     args.seed, opts.bpe, opts.vocab, precision(vars(args)), bool(opts.smoke))
    save_dir = opts.save_dir or os.path.join(opts.wt103_dir, "checkpoints", run)
    tensorboard = opts.tensorboard_dir or os.path.join(opts.wt103_dir, "tensorboard", run)
    # One log per node: node 0's is the run's log; on a shared file system the others get their own.
    log = os.path.join(opts.log_dir, f"train-{run}.log" if opts.node_rank == 0 else f"train-{run}.node{opts.node_rank}.log")
    # The world size always explicit: fairseq's default is this machine's GPU count, not the run's.
    argv = base + flags + ["--save-dir", save_dir, "--tensorboard-logdir", tensorboard,
                           "--distributed-world-size", str(world)]
    args = parse_fairseq(argv)
    check_for_a_gpu_node(args)
    check_batch(opts, args, world, device_text(opts))
    note(f"run: {run} (checkpoints {save_dir}, log {log})")

    if opts.cpu_procs > 1:
        port = free_port() if opts.master_port == "auto" else int(opts.master_port)
        command = [os.path.join(opts.bin, "fairseq-train")] + argv + [
            "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--distributed-no-spawn",
            "--distributed-backend", "gloo"]
        shown = command + ["--distributed-rank", "$RANK"]
        note(f"command (one per rank, RANK=0..{world - 1}):")
    elif world <= 1:
        shown = [os.path.join(opts.bin, "fairseq-train")] + argv
        note("command (run in this process):")
    else:
        # --distributed-world-size (in argv) matters here too: fairseq skips torchrun's environment when its
        # default (the local GPU count) is 1.
        command = [os.path.join(opts.bin, "torchrun"), "--nnodes", str(opts.nnodes), "--node_rank", str(opts.node_rank),
                   "--nproc_per_node", str(opts.gpus), "--master_addr", opts.master_addr, "--master_port",
                   str(opts.master_port), "-m", "fairseq_cli.train"] + argv
        shown = command
        note("command:")
    print(" " + shlex.join(shown), flush=True)

    lock = run_lock.lock_path(save_dir, opts.node_rank)
    if opts.dry_run:
        holder = run_lock.read_holder(lock)
        if holder and not run_lock.stale(holder):
            fail(run_lock.refusal(lock, holder))
        return check_and_stop(opts, args, save_dir, plain_config(args))
    os.makedirs(save_dir, exist_ok=True)
    refused = run_lock.acquire(lock, note)
    if refused:
        fail(refused)
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        finished = check_and_stop(opts, args, save_dir, plain_config(args))
        if finished is not None:
            return finished
        os.makedirs(opts.log_dir, exist_ok=True)
        with output_teed_to(log):
            print(f"== {SCRIPT} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: {shlex.join(shown)}", flush=True)
            try:
                if opts.cpu_procs > 1:
                    train_cpu_ranks(command, world, opts.log_dir, run)
                elif world <= 1:
                    train_here(argv)
                elif train_torchrun(command):
                    fail(f"torchrun failed; log: {log}")
            except Exception:
                traceback.print_exc()
                fail(f"fairseq-train failed; log: {log}")
            # Global rank 0 (on node 0) writes the checkpoints; the other nodes see them on the shared file system.
            if opts.node_rank == 0 and not os.path.exists(os.path.join(save_dir, "checkpoint_last.pt")):
                fail(f"fairseq-train ended without writing {save_dir}/checkpoint_last.pt")
            note(f"trained {arch}: {save_dir}/checkpoint_last.pt")
        return 0
    finally:
        stop_children()
        signal.signal(signal.SIGTERM, previous)
        run_lock.release(lock)


def check_and_stop(opts, args, save_dir, config):
    """The saved run's checks and the disk's: 0 when there is nothing to train (finished, or DRY_RUN), else None."""
    saved = saved_run(opts.dry_run, save_dir, config)
    if saved is not None:
        updates, seconds = saved
        if args.max_update and updates >= args.max_update:
            note(f"finished: {save_dir}/checkpoint_last.pt is at update {updates} of MAX_UPDATE={args.max_update}"
                 + (f" after {seconds:,.0f} s of training" if seconds else "") + "; nothing to do")
            return 0
        note(f"resuming from {save_dir}/checkpoint_last.pt (update {updates} of {args.max_update})")
    check_free_space(save_dir, args)
    if opts.dry_run:
        note("DRY_RUN=1: not training")
        return 0
    return None


if __name__ == "__main__":
    sys.exit(main())
