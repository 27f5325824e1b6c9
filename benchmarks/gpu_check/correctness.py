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
