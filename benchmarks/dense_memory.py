"""Peak memory of one training step on the dense path (CPU): stock, RPE and URPE at lengths 512 to 8192.

    python -m benchmarks.dense_memory --json benchmarks/results/dense_memory_cpu.json

One layer of width 32 and 2 heads (so the attention's ``T x T`` tensors, not the weights, set the peak), one
sequence of ``T`` tokens, one step = forward, cross-entropy, backward (no optimizer step). Peak: the highest
"Total Allocated" of torch's profiler during the step (:func:`benchmarks.common.peak_memory_bytes`), which
counts live tensors and so does not depend on the machine's load. Stock runs fairseq's own attention.
"""

import sys

from benchmarks.common import SMOKE_SIZES, STOCK_ARCH, build, common_arguments, make_sample, peak_memory_bytes, save_results, start

ARCHS = (STOCK_ARCH, "transformer_lm_rpe", "transformer_lm_urpe")
STOCK_LAYOUT = ["--decoder-input-dim", "32", "--decoder-output-dim", "32", "--decoder-normalize-before"]


def peak(arch: str, length: int, vocab: int = 1000) -> int:
    extra = SMOKE_SIZES + (STOCK_LAYOUT if arch == STOCK_ARCH else [])
    model, task, criterion, _, _ = build(arch, length, vocab, extra + ["--dropout", "0", "--attention-dropout", "0"],
                                         optimizer=False)
    model.train()
    sample = make_sample(1, length, vocab, "cpu")

    def step():
        loss, _, _ = criterion(model, sample)
        loss.backward()

    step()  # first call: lazy buffers (fairseq's causal mask) out of the measurement
    model.zero_grad(set_to_none=True)
    return peak_memory_bytes(step)


def main(argv=None):
    parser = common_arguments(__doc__.split("\n\n")[0], "benchmarks/results/dense_memory_cpu.json")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--archs", nargs="+", default=list(ARCHS))
    args = parser.parse_args(argv)
    info, _ = start(args)
    archs = args.archs
    lengths = [64] if args.smoke else args.lengths
    results = {}  # length -> arch -> peak and ratios
    print("| length | arch | peak MiB | vs stock | vs RPE |\n|---:|---|---:|---:|---:|", flush=True)
    for length in lengths:
        peaks = {arch: peak(arch, length) for arch in archs}
        results[str(length)] = {}
        for arch in archs:
            row = {"peak_bytes": peaks[arch], "vs_stock": peaks[arch] / peaks.get(STOCK_ARCH, peaks[arch]),
                   "vs_rpe": peaks[arch] / peaks.get("transformer_lm_rpe", peaks[arch])}
            results[str(length)][arch] = row
            print(f"| {length} | {arch} | {peaks[arch] / 2**20:.1f} | {row['vs_stock']:.2f} | {row['vs_rpe']:.2f} |",
                  flush=True)
    save_results(args, __file__, argv if argv is not None else sys.argv[1:], info, results=results)


if __name__ == "__main__":
    main()
