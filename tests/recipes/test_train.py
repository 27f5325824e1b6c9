"""train.sh: the SMOKE model on CPU, two CPU processes training as one (gloo), resuming after a kill, a
finished run left alone, a saved run with other settings refused, the run's folder named by its settings,
precision, multi-node rendezvous and SLURM, SentencePiece cutoffs, the attention path option, a truncated
checkpoint_last.pt, an unknown arch, the start of the learned bias (RPE_INIT)."""

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.checkpoints import load_checkpoint, num_updates, weights

from .conftest import (BPE_VOCAB, PIPELINE_ARCHS, PIPELINE_RUNS, RECIPES, REPO, RESUME_KNOBS, RESUME_MAX_UPDATE, RESUME_SAVE_INTERVAL,
                       SMOKE_BATCH_TOKENS, SMOKE_MAX_TOKENS, SMOKE_MAX_UPDATE, WIKITEXT103_DICT, recipe_env, run_recipe,
                       train_inner)
from .dry_run import dry_run, printed_command, python_here, python_side, run_recorded, train_args

URPE = PIPELINE_ARCHS[0]
URPE_RUN, STOCK_RUN = PIPELINE_RUNS


def smoke_dir(recipe_runs, run_name):
    return recipe_runs.dir / "checkpoints" / run_name


@pytest.fixture
def full_dry_run(outside, full_size_data, stand_in_python):
    """train.sh's DRY_RUN on the full-size data folders, its Python side in this process."""
    return lambda script="train.sh", **knobs: dry_run(script, outside, full_size_data, stand_in_python, **knobs)


@pytest.mark.e2e
def test_smoke_training_on_cpu_derives_update_freq_2(recipe_runs):
    baselines = recipe_runs.get("baselines").check()
    assert "CPU, 1 process(es), --max-tokens 256 --update-freq 2: 512 tokens per update" in baselines.output
    log = (recipe_runs.dir / "logs" / f"train-{URPE_RUN}.log").read_text()
    checkpoint = load_checkpoint(smoke_dir(recipe_runs, URPE_RUN) / "checkpoint_last.pt")
    assert num_updates(checkpoint) == SMOKE_MAX_UPDATE
    cfg = checkpoint["cfg"]
    assert cfg["model"]["_name"] == URPE
    assert (cfg["model"]["decoder_layers"], cfg["model"]["decoder_embed_dim"]) == (2, 64)
    assert cfg["model"]["adaptive_input"] and cfg["criterion"]["_name"] == "adaptive_loss"
    assert cfg["optimization"]["update_freq"] == [2] and cfg["dataset"]["max_tokens"] == SMOKE_MAX_TOKENS
    assert cfg["distributed_training"]["distributed_world_size"] == 1
    assert cfg["common"]["tensorboard_logdir"] == str(recipe_runs.dir / "tensorboard" / URPE_RUN)
    assert list((recipe_runs.dir / "tensorboard" / URPE_RUN).rglob("events.out.tfevents.*"))
    updates = train_inner(log)
    assert max(updates) == SMOKE_MAX_UPDATE
    assert float(updates[SMOKE_MAX_UPDATE]["loss"]) < float(updates[5]["loss"]) - 1


@pytest.mark.e2e
def test_two_cpu_processes_train_as_one_model_with_twice_the_tokens_per_step(recipe_runs):
    """CPU_PROCS=2 (two fairseq-train ranks over gloo, --update-freq 1) against the pipeline's single
    process (--update-freq 2), both derived by train.sh from BATCH_TOKENS=512 and MAX_TOKENS=256.

    Same batches: fairseq builds and shuffles one list of batches from the same seed in every process;
    rank r takes batches r, r + 2, ... (ShardedIterator) and a single process with --update-freq 2 takes
    batches 2k and 2k + 1 for update k (GroupedIterator): the same pairs. Same gradient: legacy_ddp sums
    the two ranks' gradients, as accumulation sums the two micro-batches, and both divide by the same
    total token count. No dropout in SMOKE mode, so no random stream differs. A sum of two float32
    gradients does not depend on their order, so the weights come out equal bit for bit (observed);
    the test allows 1e-6 in case a platform's all-reduce adds in another precision.
    """
    distributed = recipe_runs.get("distributed")["train"].check()
    recipe_runs.get("baselines").check()
    assert "CPU, 2 process(es), --max-tokens 256 --update-freq 1: 512 tokens per update" in distributed.output
    assert "rank 0 finished" in distributed.output and "rank 1 finished" in distributed.output
    rank1 = (recipe_runs.dir / "logs" / "train-distributed.rank1.log").read_text()
    assert re.search(r"distributed init \(rank 1\): tcp://127\.0\.0\.1:\d+", rank1)

    two = load_checkpoint(smoke_dir(recipe_runs, "distributed") / "checkpoint_last.pt")
    one = load_checkpoint(smoke_dir(recipe_runs, URPE_RUN) / "checkpoint_last.pt")
    assert two["cfg"]["distributed_training"]["distributed_world_size"] == 2
    assert two["cfg"]["distributed_training"]["distributed_backend"] == "gloo"
    assert two["cfg"]["optimization"]["update_freq"] == [1]
    assert num_updates(two) == num_updates(one) == SMOKE_MAX_UPDATE

    # Twice the tokens of one rank's batch in every update (all but the split's last, shorter block).
    rank0_updates = train_inner(distributed.output)
    assert sorted(rank0_updates) == list(range(5, SMOKE_MAX_UPDATE + 1, 5))
    assert rank0_updates[SMOKE_MAX_UPDATE]["wpb"] == 2 * SMOKE_MAX_TOKENS == SMOKE_BATCH_TOKENS
    one_log = (recipe_runs.dir / "logs" / f"train-{URPE_RUN}.log").read_text()
    assert {n: u["loss"] for n, u in train_inner(one_log).items()} == {n: u["loss"] for n, u in rank0_updates.items()}

    w_two, w_one = weights(two), weights(one)
    assert w_two.keys() == w_one.keys() and len(w_one) > 10
    max_diff = max((w_two[k] - w_one[k]).abs().max().item() for k in w_one)
    moved = max((w_one[k] - weights(load_checkpoint(smoke_dir(recipe_runs, URPE_RUN) / "checkpoint_1_20.pt"))[k])
                .abs().max().item() for k in w_one)
    print(f"max |two processes - one process, update-freq 2| = {max_diff:.3g} (last 20 updates moved weights by {moved:.3g})")
    assert max_diff <= 1e-6, max_diff
    assert moved > 1e-2  # the comparison is not trivially between untrained models


@pytest.mark.e2e
def test_killed_training_resumes_from_checkpoint_last_to_the_same_final_update(recipe_runs):
    runs = recipe_runs.get("resume")
    killed, rerun = runs["killed"], runs["rerun"]
    assert killed.returncode != 0, killed.output[-3000:]  # stopped by SIGTERM, not finished
    assert "done training" not in killed.output
    assert runs["at_kill"] is not None, killed.output[-3000:]
    at_kill = num_updates(load_checkpoint(runs["at_kill"]))
    assert at_kill % RESUME_SAVE_INTERVAL == 0 and 0 < at_kill < RESUME_MAX_UPDATE
    killed_updates = train_inner(killed.output)

    rerun.check()
    last = recipe_runs.dir / "checkpoints" / "resume" / "checkpoint_last.pt"
    assert f"resuming from {last}" in rerun.output
    assert re.search(rf"Loaded checkpoint {re.escape(str(last))} \(epoch \d+ @ {at_kill} updates\)", rerun.output)
    resumed = sorted(train_inner(rerun.output))
    # Every update after the checkpoint is trained exactly once more: none lost, none repeated.
    assert resumed == list(range(at_kill + 1, RESUME_MAX_UPDATE + 1)), resumed[:5]
    assert max(killed_updates) >= at_kill  # the killed run had got that far
    assert f"Stopping training due to num_updates: {RESUME_MAX_UPDATE} >= max_update: {RESUME_MAX_UPDATE}" in rerun.output
    assert num_updates(load_checkpoint(last)) == RESUME_MAX_UPDATE
    # The log kept both runs.
    log = (recipe_runs.dir / "logs" / "train-resume.log").read_text()
    assert log.count("== train.sh ") == 2


def saved_files(save_dir):
    return {path.name: (path.stat().st_mtime_ns, path.read_bytes()) for path in save_dir.iterdir()}


@pytest.mark.e2e
def test_rerun_of_a_finished_run_exits_0_in_one_line_and_leaves_checkpoint_last_bit_identical(recipe_runs,
                                                                                              stand_in_python):
    """fairseq itself would take one more update past --max-update (and the cosine schedule restarts
    there): train.sh reads the checkpoint's num_updates and starts no training. The rerun is train.sh's
    shell part for real and its Python part in this process (dry_run.py), without DRY_RUN."""
    recipe_runs.get("resume")["rerun"].check()
    save = recipe_runs.dir / "checkpoints" / "resume"
    before = saved_files(save)
    finished = python_here("train.sh", recipe_runs.cwd, recipe_runs.wt103, stand_in_python, **RESUME_KNOBS)
    assert finished.returncode == 0, finished.output[-3000:]
    assert saved_files(save) == before  # checkpoint_last.pt and the others: the same bytes, not even rewritten
    lines = [line for line in finished.output.splitlines() if line.startswith("== finished:")]
    assert len(lines) == 1 and lines[0].startswith(
        f"== finished: {save}/checkpoint_last.pt is at update {RESUME_MAX_UPDATE} of MAX_UPDATE={RESUME_MAX_UPDATE}")
    assert lines[0].endswith("; nothing to do") and "Loaded checkpoint" not in finished.output
    log = (recipe_runs.dir / "logs" / "train-resume.log").read_text()
    assert log.count("== train.sh ") == 2  # the killed run and its resumption; the finished rerun logged nothing


@pytest.mark.e2e
def test_rerun_with_other_settings_is_refused_naming_each_setting_and_both_values(recipe_runs, stand_in_python):
    """The saved run (RUN_NAME=resume) against a command that changes each setting that defines a run: arch, L,
    tokens per update, the lr schedule, RPE_INIT, seed, BPE and precision (fp16: GPUS=1, since CPU training is
    fp32; the refusal comes before anything would start on a device)."""
    recipe_runs.get("resume")["rerun"].check()
    recipe_runs.get("bpe")["binarize"].check()  # the SentencePiece data-bin folder, wikitext-103-spm500
    save = recipe_runs.dir / "checkpoints" / "resume"
    before = saved_files(save)
    changed = dict(ARCH="transformer_lm_rpe_wiki103", TOKENS_PER_SAMPLE=32, BATCH_TOKENS=1024, LR="0.5", WARMUP_UPDATES=5,
                   RPE_INIT="alibi", SEED=2, BPE="sentencepiece", VOCAB=BPE_VOCAB, GPUS=1, PRECISION="fp16")
    refused = python_here("train.sh", recipe_runs.cwd, recipe_runs.wt103, stand_in_python, **dict(RESUME_KNOBS, **changed))
    assert refused.returncode == 1, refused.output[-3000:]
    assert (f"train.sh: error: {save}/checkpoint_last.pt holds a run with other settings; refusing to resume it with "
            "these: ") in refused.output
    for difference in (f"ARCH (--arch): saved '{URPE}', now 'transformer_lm_rpe_wiki103'",
                       "TOKENS_PER_SAMPLE (--tokens-per-sample): saved 64, now 32",
                       "BATCH_TOKENS (--max-tokens x devices x --update-freq): saved 512, now 1024",
                       "LR (--lr): saved [1.0], now [0.5]", "WARMUP_UPDATES (--warmup-updates): saved 10, now 5",
                       # the cosine period: MAX_UPDATE - WARMUP_UPDATES (10 saved, 5 now)
                       f"LR_PERIOD_UPDATES (--lr-period-updates): saved {RESUME_MAX_UPDATE - 10:.1f}, "
                       f"now {RESUME_MAX_UPDATE - 5:.1f}",
                       "RPE_INIT (--rpe-init): saved 'zero', now 'alibi'", "SEED (--seed): saved 1, now 2",
                       f"BPE/VOCAB (the data-bin folder): saved 'wikitext-103', now 'wikitext-103-spm{BPE_VOCAB}'",
                       "PRECISION: saved 'fp32', now 'fp16'"):
        assert difference in refused.output, difference
    assert saved_files(save) == before and "Loaded checkpoint" not in refused.output


@pytest.mark.e2e
def test_run_folders_are_named_by_arch_length_bias_start_seed_data_and_precision(recipe_runs):
    recipe_runs.get("baselines").check()
    checkpoints = {p.name for p in (recipe_runs.dir / "checkpoints").iterdir()}
    assert set(PIPELINE_RUNS) <= checkpoints
    for run in PIPELINE_RUNS:
        cfg = load_checkpoint(smoke_dir(recipe_runs, run) / "checkpoint_last.pt")["cfg"]
        arch, length, *rest = run.split("-")
        assert arch == cfg["model"]["_name"] and length == f"L{cfg['task']['tokens_per_sample']}"
        assert f"seed{cfg['common']['seed']}" in rest and "words" in rest and "fp32" in rest and rest[-1] == "smoke"
    assert "init_zero" in URPE_RUN.split("-")  # the learned T5 bias starts flat (run_baselines.sh's RPE_INIT)
    assert not any(part.startswith("init_") for part in STOCK_RUN.split("-"))  # RPE_INIT changes nothing there


def test_run_name_changes_with_each_setting_that_defines_a_run(full_dry_run):
    """Another RPE_INIT, seed, L, data or precision is another folder, so a sweep never resumes the wrong run."""
    def run_name(**knobs):
        output = full_dry_run(GPUS=8, ARCH="transformer_lm_rpe_wiki103", **knobs).check().output
        return re.search(r"^== run: (\S+) ", output, re.M).group(1)

    assert run_name() == "transformer_lm_rpe_wiki103-L3072-batch73728-init_zero-seed1-words-fp16"
    assert run_name(RPE_INIT="alibi", SEED=2, TOKENS_PER_SAMPLE=512, MAX_TOKENS=9216, PRECISION="fp32", BPE="sentencepiece",
                    VOCAB=32000) == "transformer_lm_rpe_wiki103-L512-batch73728-init_alibi-seed2-spm32000-fp32"
    assert run_name(BATCH_TOKENS=147456) == "transformer_lm_rpe_wiki103-L3072-batch147456-init_zero-seed1-words-fp16"


def test_bf16_is_refused_before_anything_starts_saying_why(outside, full_size_data):
    run = run_recipe("train.sh", outside, full_size_data, timeout=60, DRY_RUN=1, GPUS=8, PRECISION="bf16")
    assert run.returncode != 0
    assert ("train.sh: error: PRECISION=bf16 has no GPU route in fairseq 0.12.3.1: its options.py turns --bf16 into "
            "--tpu") in run.output
    assert "--amp autocasts to float16 only" in run.output and "== command" not in run.output


def test_each_precision_reaches_fairseq_as_a_gpu_node_runs_it_and_a_tpu_flag_is_refused(full_dry_run):
    """fairseq's own parse of the command train.sh builds: --fp16 or full precision, never --tpu (which
    fairseq sets for --bf16, and which fails on a GPU node when the trainer asks torch_xla for a device)."""
    fp16 = train_args(full_dry_run(GPUS=8).check().output)
    assert fp16.fp16 and not fp16.bf16 and not fp16.tpu and not fp16.amp and not fp16.cpu
    fp32 = train_args(full_dry_run(GPUS=8, PRECISION="fp32").check().output)
    assert not fp32.fp16 and not fp32.bf16 and not fp32.tpu and not fp32.cpu
    sneaked = full_dry_run(GPUS=8, PRECISION="fp32", EXTRA_ARGS="--bf16")
    assert sneaked.returncode == 1
    assert "train.sh: error: the command turns on --tpu (fairseq's options.py sets it for --bf16" in sneaked.output


def test_several_nodes_need_a_master_addr_that_is_not_loopback(outside, full_size_data):
    for addr in ("127.0.0.1", "localhost"):
        run = run_recipe("train.sh", outside, full_size_data, timeout=60, DRY_RUN=1, GPUS=8, NNODES=3, MASTER_ADDR=addr)
        assert run.returncode != 0
        assert f"train.sh: error: MASTER_ADDR={addr} is a loopback address: with NNODES=3 every node would wait" in run.output
    unset = run_recipe("train.sh", outside, full_size_data, timeout=60, DRY_RUN=1, GPUS=8, NNODES=3)
    assert unset.returncode != 0
    assert "train.sh: error: NNODES=3 needs MASTER_ADDR, the address of node 0" in unset.output


def test_slurm_example_starts_one_train_sh_per_node_with_its_rank_and_node_0_as_master(tmp_path, full_size_data,
                                                                                      stand_in_python):
    """slurm_train.sbatch (2 nodes x 8 GPUs, BATCH_TOKENS=98304) under a stand-in srun (its command once per node, SLURM_NODEID set as srun sets it;
    its options recorded) and scontrol (the allocation's host names): srun asks for the job's CPUs per task
    (since Slurm 22.05 it does not take sbatch's by itself), and each node's train.sh dry run goes through
    fairseq's parser."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/usr/bin/env bash\n[ "$1 $2" = "show hostnames" ] && printf "gpu17\\ngpu18\\n"\n')
    (bin_dir / "srun").write_text(
        "#!/usr/bin/env bash\nwhile [[ $1 == --* ]]; do echo \"$1\" >> srun.options; shift; done\n"
        'for ((node = 0; node < SLURM_NNODES; node++)); do\n'
        '  SLURM_NODEID=$node RECORDED_COMMAND=$PWD/node$node.command "$@" > "node$node.out" 2>&1 || exit 1\ndone\n')
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    save = tmp_path / "save"
    env = recipe_env(full_size_data, DRY_RUN=1, BATCH_TOKENS=98304, SAVE_DIR=save, URPE_VENV=stand_in_python, SLURM_NNODES=2,
                     SLURM_JOB_NODELIST="gpu[17-18]", SLURM_GPUS_PER_NODE="h100:8", SLURM_CPUS_PER_TASK=16,
                     SLURM_SUBMIT_DIR=REPO)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    sbatch = subprocess.run(["bash", str(RECIPES / "slurm_train.sbatch")], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60)
    assert sbatch.returncode == 0, sbatch.stderr + "".join(p.read_text() for p in tmp_path.glob("node*.out"))
    assert (tmp_path / "srun.options").read_text().split() == ["--ntasks-per-node=1", "--cpus-per-task=16",
                                                               "--kill-on-bad-exit=1"]
    for node in (0, 1):
        shell = (tmp_path / f"node{node}.out").read_text()
        for knob in ("NNODES=2", f"NODE_RANK={node}", "MASTER_ADDR=gpu17", "GPUS=8"):
            assert f"  {knob}\n" in shell, shell
        code, output = run_recorded(tmp_path / f"node{node}.command", tmp_path)
        assert code == 0, output
        command = printed_command(output)
        assert command[1:13] == ["--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "8", "--master_addr",
                                 "gpu17", "--master_port", "29500", "-m", "fairseq_cli.train"]
        args = train_args(output)
        assert args.distributed_world_size == 16 and args.update_freq == [2] and not args.tpu
    # Resumes on every node: a checkpoint as the run on 2 x 8 GPUs saves it, then each node's rerun.
    save.mkdir()
    cfg = python_side("launch_training").plain_config(train_args(output))
    torch.save({"cfg": cfg, "model": {}, "optimizer_history": [{"num_updates": 4000}], "extra_state": {}},
               save / "checkpoint_last.pt")
    for node in (0, 1):
        code, output = run_recorded(tmp_path / f"node{node}.command", tmp_path)
        assert code == 0 and f"== resuming from {save}/checkpoint_last.pt (update 4000 of 286000)" in output, output


def test_sentencepiece_full_run_cuts_adaptive_input_and_softmax_inside_its_dictionary(full_dry_run):
    run = full_dry_run(GPUS=8, BPE="sentencepiece", VOCAB=32000).check()
    args = train_args(run.output)
    vocab = 32004  # the stand-in spm32000 dictionary: 32,000 entries and fairseq's 4 special symbols
    assert args.adaptive_input_cutoff == args.adaptive_softmax_cutoff == f"{vocab // 4},{vocab // 2}"
    assert args.data.endswith("wikitext-103-spm32000")
    words = train_args(full_dry_run(GPUS=8).check().output)  # word level: the _wiki103 archs' own cutoffs
    assert words.adaptive_softmax_cutoff == "20000,60000" and 60000 < WIKITEXT103_DICT


def test_cutoffs_beyond_the_dictionary_are_refused_before_launch_naming_the_option(full_dry_run):
    run = full_dry_run(GPUS=8, BPE="sentencepiece", VOCAB=32000, EXTRA_ARGS="--adaptive-softmax-cutoff 20000,60000")
    assert run.returncode == 1
    assert "train.sh: error: --adaptive-softmax-cutoff 20000,60000 does not fit the dictionary of" in run.output
    assert "(32004 symbols)" in run.output and "== command" not in run.output


@pytest.mark.parametrize("size", ["", "_tiny", "_wiki103", "_gpt2_small"])
def test_every_size_gets_adaptive_cutoffs_inside_a_sentencepiece_dictionary_or_is_refused_before_launch(full_dry_run,
                                                                                                      size):
    """With BPE=sentencepiece every size of an arch trains with the adaptive softmax that --criterion adaptive_loss
    needs, cut inside the dictionary; at word level only the _wiki103 size has one (20000,60000), and the others are
    refused naming the option instead of failing at fairseq's first step."""
    arch = f"transformer_lm_urpe{size}"
    args = train_args(full_dry_run(GPUS=8, ARCH=arch, BPE="sentencepiece", VOCAB=32000).check().output)
    assert args.adaptive_softmax_cutoff == "8001,16002" and args.criterion == "adaptive_loss"
    words = full_dry_run(GPUS=8, ARCH=arch)
    if size == "_wiki103":
        assert train_args(words.check().output).adaptive_softmax_cutoff == "20000,60000"
    else:
        assert words.returncode == 1
        assert (f"train.sh: error: --arch {arch} has no adaptive softmax (no --adaptive-softmax-cutoff), which the "
                "recipe's --criterion adaptive_loss needs") in words.output
        assert "== command" not in words.output


def test_every_arch_is_given_only_the_position_options_its_kind_reads(full_size_data, capsys):
    """What launch_training.py adds to each arch of the plugin (every kind, variant and size of the registry) and to
    fairseq's own: --urpe-attention-impl to the plugin's archs only, and --rpe-* options only where the arch's kind
    reads them (POSITION_KINDS[kind].reads); eval.sh's fairseq-eval-lm commands carry none."""
    import argparse

    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_urpe.models.architectures import ARCHITECTURES
    from fairseq_urpe.models.position_kinds import POSITION_KINDS

    launch = python_side("launch_training")
    stock = [a for a in ARCH_MODEL_REGISTRY if a.startswith("transformer_lm") and a not in ARCHITECTURES]
    assert len(ARCHITECTURES) > 100 and "transformer_lm_wiki103" in stock
    given = set()
    for arch in list(ARCHITECTURES) + stock:
        args = argparse.Namespace(arch=arch)
        if arch in ARCHITECTURES:
            ARCHITECTURES[arch](args)  # the arch's defaults, as fairseq-train applies them
        for rpe_init in ("alibi", "zero"):
            for impl in ("auto", "dense", "fused"):
                opts = argparse.Namespace(rpe_init=rpe_init, attention_impl=impl)
                flags = launch.position_flags(opts, args)
                names = [f for f in flags if f.startswith("--")]
                given.update(names)
                if arch not in ARCHITECTURES:
                    assert flags == [], (arch, flags)
                    continue
                reads = {"--" + option.replace("_", "-") for option in POSITION_KINDS[str(args.rpe_kind)].reads}
                assert names[0] == "--urpe-attention-impl" and flags[1] == impl, (arch, flags)
                assert set(names[1:]) <= reads, (arch, args.rpe_kind, flags)
                assert ("--rpe-init" in names) == ("--rpe-init" in reads), (arch, flags)
    assert given == {"--urpe-attention-impl", "--rpe-init"}
    capsys.readouterr()

    table = python_side("eval_lm_table")
    options = table.parse_options(["--arch", URPE, "--rpe-init", "zero", "--precision", "fp16", "--bpe", "none",
                                   "--wt103-dir", str(full_size_data), "--data", "data", "--log-dir", "logs", "--seed", "1",
                                   "--tokens-per-sample", "3072", "--vocab", "32000", "--checkpoint", "model.pt"])
    options.words = {}
    sizes = {split: np.array([10, 700, 30]) for split in options.splits}
    for row in table.make_rows(options, 3072, 3072, True, sizes):
        argv = table.eval_lm_argv(options, row, row["max_tokens"])
        assert not [a for a in argv if a.startswith(("--rpe-", "--urpe-"))], argv


def test_fused_attention_reaches_the_plugins_archs_only_and_is_refused_on_cpu(full_dry_run, outside, full_size_data):
    fused = train_args(full_dry_run(GPUS=8, ATTENTION_IMPL="fused").check().output)
    assert fused.urpe_attention_impl == "fused"
    stock = full_dry_run(GPUS=8, ATTENTION_IMPL="fused", ARCH="transformer_lm_wiki103").check()
    assert not hasattr(train_args(stock.output), "urpe_attention_impl")
    assert "ATTENTION_IMPL=fused applies to the plugin's archs; transformer_lm_wiki103 runs fairseq's own attention" in stock.output
    cpu = run_recipe("train.sh", outside, full_size_data, timeout=60, DRY_RUN=1, SMOKE=1, ATTENTION_IMPL="fused")
    assert cpu.returncode != 0
    assert "train.sh: error: ATTENTION_IMPL=fused needs GPUs (the fused kernel runs on CUDA)" in cpu.output


@pytest.mark.e2e
def test_training_log_names_the_attention_path(recipe_runs):
    recipe_runs.get("baselines").check()
    log = (recipe_runs.dir / "logs" / f"train-{URPE_RUN}.log").read_text()
    paths = re.findall(r"\| INFO \| fairseq_urpe\.kernels\.dispatch \| attention path: (.*)$", log, re.M)
    assert paths and all(path.startswith("dense (") for path in paths), paths  # CPU: never fused
    stock = (recipe_runs.dir / "logs" / f"train-{STOCK_RUN}.log").read_text()
    assert "attention path:" not in stock  # fairseq's own attention


def test_gpu_count_that_cannot_keep_the_batch_is_refused_saying_what_would(full_dry_run):
    refused = full_dry_run(GPUS=8, NNODES=2, MASTER_ADDR="node0")
    assert refused.returncode == 1
    assert ("BATCH_TOKENS=73728 tokens per update is not a whole number of batches of --max-tokens 3072 (MAX_TOKENS, or "
            "EXTRA_ARGS) on 16 device(s)") in refused.output
    assert "use a device count that divides 24" in refused.output and "== command" not in refused.output


def test_unbinarized_data_is_refused_before_anything_is_written(tmp_path, outside):
    run = run_recipe("train.sh", outside, "wt103", timeout=60, SMOKE=1, DATA_BIN=tmp_path / "nothing")
    assert run.returncode != 0
    assert f"{tmp_path / 'nothing'} is not binarized data (no .done marker): run binarize.sh first" in run.output
    assert not (outside / "wt103").exists()


def test_unknown_arch_is_refused_naming_it_and_the_known_ones(full_dry_run, outside):
    run = full_dry_run(GPUS=8, ARCH="transformer_lm_urpe_wiki104")
    assert run.returncode == 1
    assert "train.sh: error: unknown ARCH=transformer_lm_urpe_wiki104: fairseq-train (with --user-dir fairseq_urpe) has no such --arch" in run.output
    assert "transformer_lm_urpe_wiki103" in run.output.split("unknown ARCH=")[1]  # the known ones are listed
    assert not (outside / "checkpoints").exists() and "== command" not in run.output


@pytest.mark.e2e
def test_rpe_init_reaches_fairseq_train_and_the_checkpoint_and_zero_is_every_recipes_default(recipe_runs, full_dry_run):
    baselines = recipe_runs.get("baselines").check()  # run_baselines.sh without RPE_INIT
    assert "  RPE_INIT=zero" in baselines.output
    assert (f"== bias start: {URPE} (--rpe-kind t5) learns its bias b, started flat, b = 0 (RPE_INIT=zero, "
            "--rpe-init zero)") in baselines.output
    assert "== bias start: transformer_lm_wiki103 is fairseq's own arch, without a relative bias; RPE_INIT does not apply" \
        in baselines.output
    assert load_checkpoint(smoke_dir(recipe_runs, URPE_RUN) / "checkpoint_last.pt")["cfg"]["model"]["rpe_init"] == "zero"
    stock = load_checkpoint(smoke_dir(recipe_runs, STOCK_RUN) / "checkpoint_last.pt")
    assert "rpe_init" not in stock["cfg"]["model"]  # fairseq's own arch is not given the plugin's flag

    resume = recipe_runs.get("resume")["rerun"].check()  # train.sh without RPE_INIT: the same default
    assert "  RPE_INIT=zero" in resume.output and " --rpe-init zero " in resume.output.split("== command")[1]
    resumed = load_checkpoint(recipe_runs.dir / "checkpoints" / "resume" / "checkpoint_last.pt")
    assert resumed["cfg"]["model"]["rpe_init"] == "zero"
    alibi = full_dry_run(GPUS=8, RPE_INIT="alibi").check()
    assert (f"== bias start: {URPE} (--rpe-kind t5) learns its bias b, started on ALiBi's line -m_h|k| "
            "(RPE_INIT=alibi, --rpe-init alibi)") in alibi.output
    assert train_args(alibi.output).rpe_init == "alibi"
    defaults = {script: re.findall(r"^RPE_INIT=\$\{RPE_INIT:-(.*)\}$", (RECIPES / script).read_text(), re.M)
                for script in ("train.sh", "eval.sh", "run_baselines.sh")}
    assert defaults == {script: ["$RPE_INIT_DEFAULT"] for script in defaults}  # stated once, in common.sh
    assert re.findall(r"^RPE_INIT_DEFAULT=(\w+)$", (RECIPES / "common.sh").read_text(), re.M) == ["zero"]


def test_rpe_init_of_a_fixed_bias_changes_nothing_and_a_bad_value_is_refused_naming_the_knob(full_dry_run, outside,
                                                                                              full_size_data):
    alibi = full_dry_run(GPUS=8, RPE_INIT="zero", ARCH="transformer_lm_urpe_alibi_wiki103").check()
    assert ("== bias start: transformer_lm_urpe_alibi_wiki103 (--rpe-kind alibi) has no learned bias b; RPE_INIT=zero "
            "changes nothing") in alibi.output
    assert "--rpe-init" not in printed_command(alibi.output)
    bad = run_recipe("train.sh", outside, full_size_data, timeout=60, DRY_RUN=1, GPUS=8, RPE_INIT="ALiBi")
    assert bad.returncode != 0
    assert ("train.sh: error: RPE_INIT must be alibi (the learned bias starts on ALiBi's line) or zero (flat), "
            "got RPE_INIT=ALiBi") in bad.output
    assert "== command" not in bad.output
