"""The runs of run_baselines.sh and what they cost, printed before anything starts.

    python sweep_runs.py --sweep core|full [--archs "A B ..."] --runs-file FILE [the defaults of a run]

- ``core``: the runs that map onto published settings: fairseq's stock ``transformer_lm_wiki103``
  (Baevski & Auli), ALiBi at L = 512 with 9,216 tokens per GPU batch (Press et al.'s WikiText-103 setting;
  on a GPU count where that cannot keep the tokens per update, the largest batch of whole blocks that does,
  4,608 on 16 GPUs), and the plugin's T5-bias RPE and URPE archs (with RPE_INIT=zero, the recipes' default,
  the URPE paper's flat start);
- ``full``: stock, then the RPE and URPE archs of every position kind in the plugin's registry
  (``baseline_variants()``, read when this runs: a kind registered later joins without an edit here);
- ``--archs``: exactly those archs.

Prints each run with its GPU-hours from the README's throughput model (``throughput_model``). With
``--check``, then checks every run as ``DRY_RUN=1 bash train.sh`` would, in this one process (fairseq
imported once for the sweep): train.sh's shell part for real, its Python side (``launch_training.main``)
here, and stops at the first run refused. Writes one run per line to FILE: its arch, its run name (with
``--check``; else ``-``), then the knobs it sets on top of the environment's (``KNOB=value``). With
``--smoke`` the core runs keep their arch but not their sizes (SMOKE sets its own).
"""

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from run_identity import batch_layouts  # noqa: E402
from throughput_model import MFU, RELATIVE_FACTORS, gpu_hours, hours_text  # noqa: E402

from fairseq_urpe.models.architectures import ARCHITECTURES, baseline_variants  # noqa: E402

STOCK = "transformer_lm_wiki103"
CORE = [
    (STOCK, {}),
    ("transformer_lm_alibi_wiki103", {"TOKENS_PER_SAMPLE": "512", "MAX_TOKENS": "9216"}),
    ("transformer_lm_rpe_wiki103", {}),
    ("transformer_lm_urpe_wiki103", {}),
]
SIZE_KNOBS = ("TOKENS_PER_SAMPLE", "MAX_TOKENS")


def fitted(knobs, batch_tokens, devices):
    """A core run's knobs with MAX_TOKENS lowered, where needed, to the largest batch per device of whole blocks
    that keeps ``batch_tokens`` per update on ``devices`` devices (ALiBi's 9,216 is 4,608 on 16 GPUs)."""
    if "MAX_TOKENS" not in knobs or not devices:
        return knobs
    layouts = batch_layouts(batch_tokens, devices, int(knobs["TOKENS_PER_SAMPLE"]), int(knobs["MAX_TOKENS"]))
    return dict(knobs, MAX_TOKENS=str(layouts[0][0])) if layouts else knobs


def runs(sweep, archs, smoke, batch_tokens=73728, devices=0):
    if archs:
        return [(arch, {}) for arch in archs.split()]
    if sweep == "full":
        return [(STOCK, {})] + [(f"transformer_lm_{variant}_wiki103", {}) for variant in baseline_variants()]
    if smoke:
        return [(arch, {k: v for k, v in knobs.items() if k not in SIZE_KNOBS}) for arch, knobs in CORE]
    return [(arch, fitted(knobs, batch_tokens, devices)) for arch, knobs in CORE]


def check(arch, knobs):
    """``(run name, finished)`` of a run as train.sh's DRY_RUN checks it, or exit 1 naming the run and the reason."""
    import launch_training  # fairseq, once for every run

    what = arch + "".join(f" {k}={v}" for k, v in knobs.items())
    with tempfile.TemporaryDirectory() as tmp:
        command_file = os.path.join(tmp, "command")
        env = dict(os.environ, **knobs, ARCH=arch, DRY_RUN="1", CHECK_COMMAND_FILE=command_file)
        shell = subprocess.run(["bash", os.path.join(HERE, "train.sh")], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        output, code = shell.stdout, shell.returncode
        if code == 0:
            with open(command_file, "rb") as f:
                command = f.read().decode().split("\0")[:-1]
            captured = io.StringIO()
            try:
                with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
                    code = launch_training.main(command[1:]) or 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            output += captured.getvalue()
    if code != 0:
        print("\n".join(output.rstrip().splitlines()[-5:]), file=sys.stderr)
        print(f"run_baselines.sh: error: {what}: train.sh refuses this run (above); nothing was started", file=sys.stderr)
        sys.exit(1)
    name = re.search(r"^== run: (\S+) ", output, re.M).group(1)
    return name, re.search(r"^== finished:", output, re.M) is not None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", choices=("core", "full"), required=True)
    parser.add_argument("--archs", default="")
    parser.add_argument("--smoke", type=int, default=0)
    parser.add_argument("--runs-file", required=True)
    parser.add_argument("--tokens-per-sample", type=int, required=True)
    parser.add_argument("--max-update", type=int, required=True)
    parser.add_argument("--batch-tokens", type=int, required=True)
    parser.add_argument("--peak-tflops", type=float, required=True)
    parser.add_argument("--devices", type=int, default=0, help="GPUs in all (GPUS x NNODES); 0: unknown")
    parser.add_argument("--check", action="store_true", help="check every run with train.sh's DRY_RUN (module doc)")
    args = parser.parse_args(argv)

    chosen = runs(args.sweep, args.archs, args.smoke, args.batch_tokens, args.devices)
    print(f"== {len(chosen)} run(s), one after another:")
    total_low = total_high = 0.0
    for arch, knobs in chosen:
        length = int(knobs.get("TOKENS_PER_SAMPLE", args.tokens_per_sample))
        low, high = gpu_hours(length, args.max_update, args.batch_tokens, arch in ARCHITECTURES, args.peak_tflops)
        total_low, total_high = total_low + low, total_high + high
        cost = "" if args.smoke else f": {hours_text(low, high)} GPU-hours"
        print(f"  {arch}" + "".join(f" {k}={v}" for k, v in knobs.items()) + cost)
    if args.smoke:
        print("== cost: SMOKE=1 runs tiny models; the GPU-hour estimate is for the full-size runs")
    else:
        wall = (f", {hours_text(total_low / 24 / args.devices, total_high / 24 / args.devices)} days on these "
                f"{args.devices} GPUs" if args.devices else "")
        print(f"== cost (estimate, not measured): {hours_text(total_low, total_high)} GPU-hours in all{wall}: the "
              f"README's throughput model, {MFU:.0%} of a {args.peak_tflops:g} TFLOP/s peak (GPU_PEAK_TFLOPS), RPE/URPE "
              f"at {RELATIVE_FACTORS[0]}-{RELATIVE_FACTORS[1]}x stock's time", flush=True)
    names = ["-"] * len(chosen)
    if args.check:  # every run checked before any starts
        for i, (arch, knobs) in enumerate(chosen):
            names[i], finished = check(arch, knobs)
            print(f"== checked {arch}: run {names[i]}" + (", finished already" if finished else ""), flush=True)
    with open(args.runs_file, "w") as f:
        for (arch, knobs), name in zip(chosen, names):
            f.write(" ".join([arch, name] + [f"{k}={v}" for k, v in knobs.items()]) + "\n")


if __name__ == "__main__":
    main()
