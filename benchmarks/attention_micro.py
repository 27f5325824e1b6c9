"""Attention alone, forward and forward+backward: every path side by side at the models' base sizes.

Paths: ``stock`` (fairseq's MultiheadAttention, which runs torch's fused scaled-dot-product attention)
and the self-attention of layer 0 of every base-size plugin arch (RPE, URPE bucketed, URPE unique and
any kind registered later), built through fairseq as in train_throughput.py, on the dense path; on
CUDA with Triton also the same modules on the fused path (``<arch>+fused``). The input is
``(T, B, 512)`` with fairseq's causal mask, ``B = --tokens / T``; paths take turns within every round.

    python -m benchmarks.attention_micro                   # lengths 128 512 1024 2048
    python -m benchmarks.attention_micro --smoke
"""

import statistics

import torch

from benchmarks.common import (
    SMOKE_SIZES, STOCK_ARCH, build, common_arguments, median_ratio, peak_memory_bytes, save_results, start, timed,
)


def parse_args(argv=None):
    parser = common_arguments(__doc__.split("\n")[0], "benchmarks/results/attention_micro.json")
    parser.add_argument("--archs", nargs="*", default=None)
    parser.add_argument("--lengths", nargs="*", type=int, default=[128, 512, 1024, 2048])
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per batch; B = tokens / length")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per path per round (median)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    if args.smoke:
        args.lengths, args.tokens, args.rounds, args.repeats = [16, 32], 64, 1, 1
    return args


def attention_paths(archs, max_length, smoke, dtype, device):
    """``{name: self-attention module}``: layer 0 of each arch, plus fused variants where they can run."""
    from fairseq_urpe.kernels.dispatch import triton_available

    paths = {}
    for arch in archs:
        model = build(arch, max_length, 8, SMOKE_SIZES if smoke else [], optimizer=False)[0]
        attn = model.decoder.layers[0].self_attn.to(device=device, dtype=dtype).train()
        if hasattr(attn, "attention_impl"):
            attn.attention_impl = "dense"
            if device.type == "cuda" and triton_available():
                fused = build(arch, max_length, 8, SMOKE_SIZES if smoke else [], optimizer=False)[0]
                paths[f"{arch}+fused"] = fused.decoder.layers[0].self_attn.to(device=device, dtype=dtype).train()
                paths[f"{arch}+fused"].attention_impl = "fused"
        paths["stock" if arch == STOCK_ARCH else arch] = attn
    return paths


def main(argv=None):
    args = parse_args(argv)
    info, archs = start(args)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, args.dtype)
    paths = attention_paths(archs, max(args.lengths), args.smoke, dtype, device)
    names = sorted(paths, key=lambda n: (n != "stock", n))
    embed = paths[names[0]].embed_dim
    print(f"paths: {' '.join(names)}; lengths {args.lengths}; {args.tokens} tokens per batch; {args.dtype}", flush=True)

    def inputs(length):
        batch = max(1, args.tokens // length)
        x = torch.randn(length, batch, embed, device=device, dtype=dtype, requires_grad=True)
        mask = torch.triu(torch.full((length, length), float("-inf"), device=device, dtype=dtype), 1)
        return x, mask

    def forward(attn, x, mask):
        return attn(x, x, x, attn_mask=mask, need_weights=False)[0]

    def forward_backward(attn, x, mask):
        forward(attn, x, mask).float().sum().backward()
        attn.zero_grad(set_to_none=True)
        x.grad = None

    keys = ("forward_ms", "forward_cpu_ms", "forward_backward_ms", "forward_backward_cpu_ms")
    results = {n: {name: {key: [] for key in keys} for name in names} for n in args.lengths}
    data = {n: inputs(n) for n in args.lengths}
    for n in args.lengths:  # warm-up (compiles the fused kernels on first use)
        for name in names:
            forward_backward(paths[name], *data[n])
    for r in range(args.rounds):
        for n in args.lengths:
            for name in names:
                attn, (x, mask) = paths[name], data[n]
                res = results[n][name]
                with torch.no_grad():
                    wall, cpu = timed(lambda: forward(attn, x, mask), args.repeats)
                res["forward_ms"].append(1000 * wall)
                res["forward_cpu_ms"].append(1000 * cpu)
                wall, cpu = timed(lambda: forward_backward(attn, x, mask), args.repeats)
                res["forward_backward_ms"].append(1000 * wall)
                res["forward_backward_cpu_ms"].append(1000 * cpu)
        print(f"round {r + 1} done", flush=True)
    for n in args.lengths:
        for name in names:
            attn, (x, mask) = paths[name], data[n]
            live = sum(p.numel() * p.element_size() for p in attn.parameters()) + x.numel() * x.element_size()
            results[n][name]["peak_memory_bytes"] = peak_memory_bytes(lambda: forward_backward(attn, x, mask),
                                                                      0 if device.type == "cuda" else live)

    print("\n| length | path | forward ms | fwd+bwd ms | vs stock | fwd+bwd CPU-ms | vs stock | peak MiB | vs stock |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.lengths:
        stock = results[n]["stock"]
        for name in names:
            res = results[n][name]
            for key in ("forward_backward_ms", "forward_backward_cpu_ms"):
                res[f"{key}_vs_stock"] = median_ratio(res[key], stock[key])
            res["memory_vs_stock"] = res["peak_memory_bytes"] / stock["peak_memory_bytes"]
            med = {key: statistics.median(res[key]) for key in keys}
            print(f"| {n} | {name} | {med['forward_ms']:.1f} | {med['forward_backward_ms']:.1f} | "
                  f"{res['forward_backward_ms_vs_stock']:.2f} | {med['forward_backward_cpu_ms']:.1f} | "
                  f"{res['forward_backward_cpu_ms_vs_stock']:.2f} | {res['peak_memory_bytes'] / 2**20:.0f} | "
                  f"{res['memory_vs_stock']:.2f} |")
    save_results(args, __file__, argv, info, results={str(n): results[n] for n in args.lengths})
    return results


if __name__ == "__main__":
    main()
