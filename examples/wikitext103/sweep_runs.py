"""The runs of run_baselines.sh and what they cost, printed before anything starts.

    python sweep_runs.py --sweep core|full [--archs "A B ..."] --runs-file FILE [the defaults of a run]

- ``core``: the runs that map onto published settings: fairseq's stock ``transformer_lm_wiki103``
  (Baevski & Auli), ALiBi at L = 512 with 9,216 tokens per GPU batch (Press et al.'s WikiText-103 setting),
  and the plugin's T5-bias RPE and URPE archs (with RPE_INIT=zero, run_baselines.sh's default, the URPE
  paper's flat start);
- ``full``: stock, then the RPE and URPE archs of every position kind in the plugin's registry
  (``baseline_variants()``, read when this runs: a kind registered later joins without an edit here);
- ``--archs``: exactly those archs.

Writes one run per line to FILE: its arch, then the knobs it sets on top of the environment's
(``KNOB=value``). With ``--smoke`` the core runs keep their arch but not their sizes (SMOKE sets its
own). Prints each run with its GPU-hours from the README's throughput model (``throughput_model``).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

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


def runs(sweep, archs, smoke):
    if archs:
        return [(arch, {}) for arch in archs.split()]
    if sweep == "full":
        return [(STOCK, {})] + [(f"transformer_lm_{variant}_wiki103", {}) for variant in baseline_variants()]
    return [(arch, {k: v for k, v in knobs.items() if not (smoke and k in SIZE_KNOBS)}) for arch, knobs in CORE]


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
    args = parser.parse_args(argv)

    chosen = runs(args.sweep, args.archs, args.smoke)
    with open(args.runs_file, "w") as f:
        for arch, knobs in chosen:
            f.write(" ".join([arch] + [f"{k}={v}" for k, v in knobs.items()]) + "\n")
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
              f"at {RELATIVE_FACTORS[0]}-{RELATIVE_FACTORS[1]}x stock's time")


if __name__ == "__main__":
    main()
