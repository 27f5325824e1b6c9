"""The README's throughput model: GPU-hours of a training run, estimated before it starts (not measured).

Work per trained token, forward and backward (3x the forward's 2 FLOP per multiply-add):

    FLOP/token = 6 N  +  12 L d layers  +  6 d c_1

with ``N = layers (4 d^2 + 2 d ffn)`` the non-embedding parameters, the dense attention over the block of
``L`` tokens (``Q K^T`` and ``A V``: ``2 L d`` multiply-adds per layer) and the head of the adaptive softmax
(its first band of ``c_1`` words at width ``d``; the tail bands are small). ``_wiki103`` (16 layers,
d = 1024, FFN 4096, c_1 = 20,000) at L = 3,072: 1.21 + 0.60 + 0.12 = 1.93 GFLOP per token.

GPU-seconds = updates x tokens per update x FLOP/token / (MFU x peak), MFU = 0.3 of the dense fp16/bf16
tensor-core peak (an assumption, not a measurement). The plugin's RPE/URPE archs: 1.2 to 2.5 times that
(1.2: the fused kernel's target against stock, not measured on a GPU; 2.5: the top of the dense path's
range, from its CPU measurement; see the README).
"""

MFU = 0.3
RELATIVE_FACTORS = (1.2, 2.5)  # RPE/URPE time per update over stock's: fused target, dense path's top
WIKI103 = dict(layers=16, width=1024, ffn=4096, head_band=20000)  # transformer_lm_wiki103 (Baevski & Auli)


def flop_per_token(tokens_per_sample, layers=16, width=1024, ffn=4096, head_band=20000):
    non_embedding = layers * (4 * width * width + 2 * width * ffn)
    return 6 * non_embedding + 12 * tokens_per_sample * width * layers + 6 * width * head_band


def gpu_hours(tokens_per_sample, updates, tokens_per_update, relative, peak_tflops):
    """``(low, high)`` GPU-hours of one run (equal for stock)."""
    seconds = updates * tokens_per_update * flop_per_token(tokens_per_sample, **WIKI103) / (MFU * peak_tflops * 1e12)
    low, high = RELATIVE_FACTORS if relative else (1.0, 1.0)
    return low * seconds / 3600, high * seconds / 3600


def hours_text(low, high):
    return f"{low:,.1f}" if abs(high - low) < 0.05 else f"{low:,.1f}-{high:,.1f}"

