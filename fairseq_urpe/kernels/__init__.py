"""Fused attention kernels (Triton) with plain PyTorch references, PyTorch's FlexAttention for the same
attentions (``flex_attention``), and the dispatch between them (``dispatch``, which ``auto`` bases on the
measured ``dispatch_table``).

``fused_urpe_attention`` and ``reference`` import only torch and triton (and torch alone), so they can be
copied out and tested or timed where fairseq is not installed; ``flex_attention`` and ``dispatch_table``
import only torch. Nothing here imports triton on import: ``dispatch`` loads the kernel the first time
it is used.
"""
