"""``correctness``: the fused kernel against the plain reference (output and every gradient), and the
attention module's fused path against its dense path."""

import torch

from .record import DEVICE, GPU, Record, cases, run_case


def correctness(record: Record, args) -> None:
    from fairseq_urpe.kernels.self_check import KernelConfig, kernel_errors, tolerance

    if GPU:
        # Most used first (the _wiki103 archs: head dim 128 with dropout; GPT-2 small: 64), in case the
        # time budget (compiles take most of it) runs out.
        both = (True, True)
        configs = [(dtype, d, dropout, both) for dtype in (torch.bfloat16, torch.float16)
                   for d, dropout in ((128, True), (64, False), (64, True), (128, False))]
        configs += [(torch.bfloat16, 64, False, (False, False)), (torch.bfloat16, 64, False, (True, False)),
                    (torch.bfloat16, 128, True, (False, True))]
        configs += [(torch.float32, 64, False, both, tf32) for tf32 in (True, False)]
        lengths = (1, 333, 1030)
    else:
        configs = [(torch.float32, 16, True, (True, True)), (torch.float64, 24, False, (False, False))]
        lengths = (1, 45)
    allowed = torch.backends.cuda.matmul.allow_tf32
    for config in cases(record, configs):
        dtype, d, dropout, tables = config[:4]
        tf32 = config[4] if len(config) > 4 else allowed
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            kc = KernelConfig(DEVICE, dtype, d, tables[0], tables[1], True, dropout)
            for length in lengths:
                name = kc.describe() + f", T={length}" + (f", TF32 {'on' if tf32 else 'off'}" if dtype == torch.float32 else "")

                def check(kc=kc, length=length):
                    errors = kernel_errors(kc, length)
                    accepted = tolerance(kc)
                    return {"ok": all(e <= accepted for e in errors.values()), "accepted": accepted,
                            "worst": max(errors.values()), "errors": errors}

                run_case(record, "kernel vs reference: " + name, check)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allowed
    # The deterministic backward (torch.use_deterministic_algorithms): against the reference, and two runs
    # bit for bit (the default backward's two runs are recorded beside it; its atomics may differ).
    det_configs = [(torch.bfloat16, 64, False), (torch.bfloat16, 128, True)] if GPU else [(torch.float64, 16, True)]
    for dtype, d, dropout in cases(record, det_configs):
        kc = KernelConfig(DEVICE, dtype, d, True, True, True, dropout, deterministic=True)
        length = lengths[-1]

        def check(kc=kc, length=length):
            errors = kernel_errors(kc, length)
            accepted = tolerance(kc)
            return {"ok": all(e <= accepted for e in errors.values()), "accepted": accepted,
                    "worst": max(errors.values()), "errors": errors}

        run_case(record, "kernel vs reference: " + kc.describe() + f", T={length}", check)
        run_case(record, f"deterministic backward, two runs bit for bit: {kc.describe()}, no padding, T={length}",
                 lambda dtype=dtype, d=d, dropout=dropout, length=length: repeat_bitwise(dtype, d, dropout, length))
    module_configs = [(torch.bfloat16, 512, 8), (torch.bfloat16, 1024, 8), (torch.float16, 512, 8)] if GPU \
        else [(torch.float64, 32, 2)]
    for dtype, embed, heads in cases(record, module_configs):
        run_case(record, f"attention module fused vs dense: {dtype}, head dim {embed // heads}",
                 lambda: module_fused_vs_dense(dtype, embed, heads, 333 if GPU else 29))


def module_fused_vs_dense(dtype, embed, heads, length):
    """URPE attention (T5 bias, unique Toeplitz) with padding: the fused path against the dense one."""
    from fairseq_urpe.kernels.self_check import TOLERANCE, relative_error
    from fairseq_urpe.modules import RelativeMultiheadAttention, T5RelativeBias, ToeplitzReweighting

    torch.manual_seed(0)
    mods = []
    for impl in ("fused", "dense"):
        torch.manual_seed(0)
        attn = RelativeMultiheadAttention(embed, heads, T5RelativeBias(heads, 32, 128),
                                          ToeplitzReweighting(heads, "unique", max_distance=256), attention_impl=impl)
        for p in (attn.position_bias.weight, attn.toeplitz.weight):
            torch.nn.init.uniform_(p, 0.2, 1.5)
        mods.append(attn.to(DEVICE, dtype))
    x = torch.randn(length, 2, embed, device=DEVICE, dtype=dtype, requires_grad=True)
    pad = torch.zeros(2, length, dtype=torch.bool, device=DEVICE)
    pad[0, -5:] = True
    pad[1, :3] = True
    mask = torch.triu(torch.full((length, length), float("-inf"), device=DEVICE), 1)
    upstream = torch.randn_like(x)
    outs = []
    for attn in mods:
        out = attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)[0]
        outs.append([out] + list(torch.autograd.grad(out, [x] + list(attn.parameters()), upstream)))
    names = ["output", "gradient of x"] + [f"gradient of {n}" for n, _ in mods[0].named_parameters()]
    errors = {n: relative_error(a, b) for n, a, b in zip(names, *outs)}
    accepted = TOLERANCE[dtype]
    return {"ok": all(e <= accepted for e in errors.values()), "accepted": accepted, "worst": max(errors.values()),
            "errors": errors}


def repeat_bitwise(dtype, head_dim, dropout, length, batch=2, heads=4):
    """Two forward + backward runs of the kernel on the same inputs (tables shorter than T: far tiles; one
    dropout seed), deterministic and default: which outputs and gradients differ between the two runs."""
    from fairseq_urpe.kernels.fused_urpe_attention import fused_causal_urpe_attention

    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(DEVICE, dtype)

    q, k, v = (randn(batch, heads, length, head_dim) for _ in range(3))
    wide = torch.promote_types(dtype, torch.float32)
    bias = torch.randn(heads, max(1, length // 4), generator=generator).to(DEVICE, wide)
    c = (torch.randn(heads, max(1, length // 5), generator=generator).abs() + 0.5).to(DEVICE, wide)
    upstream = randn(batch, heads, length, head_dim)
    seed = torch.tensor([7], dtype=torch.int64, device=DEVICE)
    names = ("output", "q", "k", "v", "bias table", "Toeplitz table")
    differing = {}
    for deterministic in (True, False):
        runs = []
        for _ in range(2):
            leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, bias, c)]
            out = fused_causal_urpe_attention(*leaves, None, scale=1.0 / head_dim ** 0.5,
                                              dropout_p=0.1 if dropout else 0.0, dropout_seed=seed,
                                              deterministic=deterministic)
            runs.append([out.detach()] + list(torch.autograd.grad(out, leaves, upstream)))
        differing["deterministic" if deterministic else "default"] = [
            name for name, a, b in zip(names, *runs) if not torch.equal(a, b)]
    return {"ok": not differing["deterministic"], "differing": differing}

