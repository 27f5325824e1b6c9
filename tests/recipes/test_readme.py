"""The READMEs' recipe commands and knob values run as written: each through its script's DRY_RUN and
fairseq's own parser, as on a node of 8 GPUs; and fairseq's batching behind --required-batch-size-multiple 1
is what the README says."""

import numpy as np

from .conftest import RECIPES, REPO
from .dry_run import dry_run, eval_lm_args, eval_lm_commands, train_args
from .readme_commands import readme_commands, undocumented

# The recipes' own pages, and the top level's lines about them.
READMES = (RECIPES / "README.md", RECIPES / "costs_and_results.md", REPO / "README.md")
GPU_NODE = "8"


def on_this_machine(script, knobs, full_size_data):
    """The knobs as written, on this machine: the stand-in data for paths (WT103_DIR, DATA_BIN), a node of
    8 GPUs where the command names no device, node 0's address where several nodes are named without it."""
    env = {k: v for k, v in knobs.items() if k not in ("WT103_DIR", "DATA_BIN", "DRY_RUN")}
    if script == "train.sh" and not {"GPUS", "CPU_PROCS", "SMOKE"} & set(env):
        env["GPUS"] = GPU_NODE
    if int(env.get("NNODES", 1)) > 1:
        env.setdefault("MASTER_ADDR", "node0")
    if script == "eval.sh":
        env.update(DATA_BIN=str(full_size_data / "data-bin" / "wikitext-103"), CPU="0")
    return env


def dictionary_size(data):
    with open(f"{data}/dict.txt") as f:
        return sum(1 for _ in f) + 4


def problems_of_train(knobs, output):
    args = train_args(output)
    found = []
    on_gpus = "SMOKE" not in knobs and "CPU_PROCS" not in knobs
    if args.tpu or (on_gpus and args.cpu):
        found.append("not a GPU command (--tpu or --cpu)")
    if on_gpus and args.fp16 != (knobs.get("PRECISION", "fp16") == "fp16"):
        found.append(f"--fp16 is {args.fp16} for PRECISION={knobs.get('PRECISION', 'fp16 (default)')}")
    vocab = dictionary_size(args.data)
    for cutoff in (args.adaptive_input_cutoff, args.adaptive_softmax_cutoff):
        if cutoff and int(cutoff.split(",")[-1]) > vocab:
            found.append(f"cutoffs {cutoff} beyond the {vocab} symbols of {args.data}")
    batch = args.max_tokens * args.distributed_world_size * args.update_freq[0]
    expected = int(knobs.get("BATCH_TOKENS", 512 if knobs.get("SMOKE") == "1" else 73728))
    if "UPDATE_FREQ" not in knobs and batch != expected:
        found.append(f"{batch} tokens per update, not {expected}")
    for knob, value in (("ATTENTION_IMPL", getattr(args, "urpe_attention_impl", None)), ("RPE_INIT", getattr(args, "rpe_init", None)),
                        ("TOKENS_PER_SAMPLE", args.tokens_per_sample), ("MAX_UPDATE", args.max_update), ("SEED", args.seed)):
        if knob in knobs and value is not None and str(value) != knobs[knob]:
            found.append(f"{knob}={knobs[knob]} reaches fairseq as {value}")
    return found


def problems_of_eval(output):
    commands = eval_lm_commands(output)
    found = [] if commands else ["no fairseq-eval-lm command printed"]
    for (split, name), argv in commands.items():
        args = eval_lm_args(argv)
        if args.cpu or args.gen_subset != split:
            found.append(f"{split} {name}: --cpu or the wrong split")
    return found


def test_every_knob_value_the_readmes_advertise_passes_dry_run_and_fairseqs_parser(outside, full_size_data,
                                                                                 stand_in_python):
    texts = [path.read_text() for path in READMES]
    assert undocumented(texts[0]) == []  # every knob span belongs to a script that documents all its knobs
    commands = readme_commands(*texts)
    walked = {script for script, _, _ in commands}
    assert walked == {"train.sh", "eval.sh", "run_baselines.sh"}, walked
    failures = []
    for script, knobs, where in commands:
        env = on_this_machine(script, knobs, full_size_data)
        run = dry_run(script, outside, full_size_data, stand_in_python, **env)
        if run.returncode != 0:
            failures.append(f"{where} ({script} {env}): exit {run.returncode}\n{run.output[-1500:]}")
            continue
        found = (problems_of_train(knobs, run.output) if script == "train.sh"
                 else problems_of_eval(run.output) if script == "eval.sh"
                 else [] if "== cost" in run.output else ["no cost printed"])
        if found:
            failures.append(f"{where} ({script} {env}): {'; '.join(found)}")
    print(f"{len(commands)} dry runs: " + "; ".join(f"{s} {k}" for s, k, _ in commands))
    assert not failures, "\n\n".join(failures)
    assert len(commands) >= 15  # the walk found the README's commands (code lines and knob spans)


def test_required_batch_size_multiple_1_fills_18_blocks_of_512_where_fairseqs_default_8_takes_16():
    """fairseq's batch_by_size keeps a multiple of --required-batch-size-multiple blocks per batch and carries
    the rest into the next: at L = 512 with --max-tokens 9216 (ALiBi's setting), 16 blocks, not 18; and it
    drops a last batch that is not such a multiple. The README gives this as the flag's reason."""
    from fairseq.data import data_utils

    sizes = np.array([512] * 100 + [300], dtype=np.int64)  # 100 blocks of L = 512 and a shorter last one

    def batches(multiple):
        return [len(b) for b in data_utils.batch_by_size(np.arange(len(sizes)), sizes.__getitem__, max_tokens=9216,
                                                         required_batch_size_multiple=multiple, num_tokens_vec=sizes)]

    assert batches(8) == [16] * 6  # 96 of the 101 blocks: 5 dropped
    assert batches(1) == [18] * 5 + [11]  # all 101
    readme = " ".join((RECIPES / "README.md").read_text().split())
    assert ("At L = 512 with `--max-tokens 9216` (ALiBi's setting) a batch is then 16 blocks, 8,192 tokens, instead "
            "of the 18 blocks that fill it; with 1 it is 18.") in readme


def test_readme_asks_for_the_gpu_check_and_a_fused_against_dense_parity_run_before_any_sweep():
    from .readme_commands import code_commands

    text = (RECIPES / "README.md").read_text()
    commands = code_commands(text)
    sweep = next(i for i, (script, _, _) in enumerate(commands) if script == "run_baselines.sh")
    parity = [knobs for script, knobs, _ in commands[:sweep] if script == "train.sh" and knobs.get("MAX_UPDATE") == "2000"]
    assert {k["ATTENTION_IMPL"] for k in parity} == {"fused", "dense"}
    assert len({k["RUN_NAME"] for k in parity}) == len(parity)  # each in a folder of its own
    assert text.index("`bash benchmarks/gpu_check.sh`") < text.index("```bash\nGPUS=8 MAX_UPDATE=2000")
