"""The GPU check of the attention paths, one section per process (benchmarks/gpu_check.sh runs them all;
``python -m benchmarks.gpu_check --section NAME`` runs one). One module per thing measured.

Sections (each catches its own failures, stops starting new cases past its time budget, and rewrites the
JSON after every case, so a killed section keeps what it measured):

- ``environment``: versions, the GPU, TF32, compute-sanitizer, the kernel's tiles.
- ``correctness``: the fused kernel against the plain reference (output and every gradient) for fp16,
  bf16 and fp32 (TF32 on and off), head dims 64 and 128, padding, lengths that are no tile multiple,
  with and without attention dropout; and the attention module's fused path against its dense path.
- ``guard_memory``: every kernel with all its tensors inside guard memory (benchmarks/guard_memory.py),
  every table combination, lengths 1, 17, 129, 333.
- ``kernel_speed``: forward+backward time and peak memory at L = 512 .. 4096, head dim 64, bf16: the
  fused kernel (bias; bias and C; with dropout 0.1) against ``scaled_dot_product_attention`` with the
  flash backend (no bias) and with the memory-efficient backend and an additive bias (an RPE user's
  alternative), and the plain dense reference.
- ``paths``: which attention path runs, by measurement: the fused kernel, FlexAttention (bias, URPE's
  shifted and band forms) and the dense path checked against float64 at a small shape, then timed
  (forward+backward, peak memory) at L2048 d64 bf16 and L3072 d128 fp16, with and without dropout, as
  ratios to SDPA flash; writes the dispatch table that ``--urpe-attention-impl auto`` reads.
- ``end_to_end``: tokens/s and peak memory of training steps (fairseq's Trainer: fp16, the recipe's
  optimizer and criterion) for stock ``transformer_lm_wiki103`` and the RPE and URPE ``_wiki103`` archs
  with the dense and the fused attention, at the recipe's 3,072-token blocks.
- ``sanitizer``: ``guard_memory`` again under ``compute-sanitizer --tool memcheck`` where it is installed.

Without CUDA the sections that can run on CPU do, under Triton's interpreter (TRITON_INTERPRET=1) at
tiny sizes: that is what the test suite runs. ``--report`` writes the Markdown summary from the JSON.
"""
