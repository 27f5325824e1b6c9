"""Fused attention kernels (Triton) with plain PyTorch references, and the dispatch between them.

``fused_urpe_attention`` and ``reference`` import only torch and triton (and torch alone), so they can be
copied out and tested or timed where fairseq is not installed. Nothing here imports triton on import:
``dispatch`` loads the kernel the first time it is used.
"""
