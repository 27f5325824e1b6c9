"""``kernel_speed``: forward+backward time and peak memory of the fused kernel against PyTorch's SDPA.

The fused URPE cases run twice: with the default ``transformer_lm_urpe``'s tables (T5 buckets, constant
from distance ``MODEL_FAR`` on, so passed with ``MODEL_FAR + 1`` entries: far tiles, the far share and
the far tiles' dQ in dK/dV; what the issue's targets and the performance model are about, "lm_tables"),
and with tables as long as the sequence (no far tiles: every tile reads its tables, the slowest case).
"""

import torch

from .prediction import MODEL_FAR
from .record import GPU, Record, cases, run_case


def kernel_speed(record: Record, args) -> None:
    if not GPU:
        record.skip("all", "needs CUDA: kernel timings are GPU measurements")
        return
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from fairseq_urpe.kernels.fused_urpe_attention import fused_causal_urpe_attention
    from fairseq_urpe.kernels.reference import causal_urpe_attention_reference

    heads, d, tokens, dtype = 16, 64, 16384, torch.bfloat16
    for length in cases(record, (512, 1024, 2048, 4096)):
        batch = max(1, tokens // length)
        q, k, v = (torch.randn(batch, heads, length, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        b = (torch.randn(heads, length, device="cuda") * 0.5).requires_grad_()
        c = (torch.rand(heads, length, device="cuda") + 0.5).requires_grad_()
        b_lm, c_lm = (t[:, :MODEL_FAR + 1].detach().clone().requires_grad_() for t in (b, c))  # the default's reach
        grad = torch.randn_like(q)
        idx = torch.arange(length, device="cuda")
        dist = (idx[:, None] - idx[None, :])
        future = dist < 0

        def bias_mask():  # (1, H, T, T): the RPE bias by distance, -inf above the diagonal; differentiable in b
            return b[:, dist.clamp(min=0)].masked_fill(future, float("-inf")).to(dtype)[None]

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return sdpa(q, k, v, is_causal=True)

        def efficient_bias():
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                return sdpa(q, k, v, attn_mask=bias_mask())

        fns = {  # the targets' cases first (the section has a time budget)
            "sdpa_flash_no_bias": (flash, (q, k, v)),
            "fused_urpe_lm_tables": (lambda: fused_causal_urpe_attention(q, k, v, b_lm, c_lm), (q, k, v, b_lm, c_lm)),
            "fused_urpe_lm_tables_dropout_0.1": (
                lambda: fused_causal_urpe_attention(q, k, v, b_lm, c_lm, dropout_p=0.1), (q, k, v, b_lm, c_lm)),
            "sdpa_efficient_with_bias": (efficient_bias, (q, k, v, b)),
            "fused_urpe_bias_and_c": (lambda: fused_causal_urpe_attention(q, k, v, b, c), (q, k, v, b, c)),
            "fused_rpe_bias": (lambda: fused_causal_urpe_attention(q, k, v, b), (q, k, v, b)),
            "fused_urpe_dropout_0.1": (lambda: fused_causal_urpe_attention(q, k, v, b, c, dropout_p=0.1), (q, k, v, b, c)),
            "dense_reference_urpe": (lambda: causal_urpe_attention_reference(q, k, v, b, c), (q, k, v, b, c)),
        }
        for name, (fn, leaves) in fns.items():
            if record.out_of_time():
                record.skip(f"L={length} {name}", "section time budget spent")
                continue

            def measure(fn=fn, leaves=leaves):
                both = triton.testing.do_bench(lambda: torch.autograd.grad(fn(), leaves, grad), warmup=25, rep=100)
                forward = triton.testing.do_bench(fn, warmup=10, rep=50)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                torch.autograd.grad(fn(), leaves, grad)
                torch.cuda.synchronize()
                return {"length": length, "batch": batch, "forward_ms": forward, "forward_backward_ms": both,
                        "peak_extra_mib": (torch.cuda.max_memory_allocated() - base) / 2**20}

            run_case(record, f"L={length} {name}", measure)
        del q, k, v, b, c, b_lm, c_lm, grad
        torch.cuda.empty_cache()
