"""Position modules built once per encoder/decoder from the options, and handed to its layers.

By default (T5, Luo et al.) one ``b`` and one ``c`` serve every layer: the encoder/decoder builds them
before its layers (:func:`~.position_kinds.build_position_modules`), owns them (outside the layers, so
``--ddp-backend fully_sharded``, which wraps each layer on its own, can still shard them), stores them
once (``decoder.position_bias.weight``) and passes them to each layer as fairseq's Linformer plugin
passes its shared compression layer. With ``--rpe-per-layer`` each layer's attention builds and owns its
own. Checkpoints of the per-layer layout are upgraded on load (:mod:`.checkpoint_upgrade`).

fairscale's FullyShardedDataParallel needs CUDA; on CPU, where fairseq would fail deep inside fairscale
(for its own models too), building refuses ``--ddp-backend fully_sharded`` by name.
"""

from contextlib import nullcontext
from typing import Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.modules.checkpoint_activations import checkpoint_wrapper

from ..modules import PositionModules, RelativeMultiheadAttention
from .checkpoint_upgrade import upgrade_per_layer_layout
from .position_kinds import build_position_modules


def relative_self_attention(layer, cfg, embed_dim: int, num_heads: int, shared: Optional[PositionModules],
                            bidirectional: bool) -> RelativeMultiheadAttention:
    """A layer's self-attention: the ``shared`` position modules, else its own, built from ``cfg``."""
    if str(cfg.urpe_attention_impl) == "flex" and cfg.attention_dropout > 0:
        raise ValueError(f"--urpe-attention-impl flex: flex_attention has no attention dropout, and --attention-dropout "
                         f"is {cfg.attention_dropout}; set it to 0, or use --urpe-attention-impl auto, fused or dense")
    own = {} if shared is not None else dict(build_position_modules(cfg, num_heads, embed_dim, bidirectional).items())
    return RelativeMultiheadAttention(
        embed_dim,
        num_heads,
        **own,
        shared=shared,
        dot_product=not cfg.dot_product_free,
        dropout=cfg.attention_dropout,
        q_noise=layer.quant_noise,
        qn_block_size=layer.quant_noise_block_size,
        attention_impl=str(cfg.urpe_attention_impl),
    )


def wrap_layer(layer, cfg):
    """What fairseq's ``build_encoder_layer``/``build_decoder_layer`` do to the layer they build, for ours:
    activation checkpointing (``--checkpoint-activations``), then fully-sharded wrapping."""
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


class SharedPositionsMixin:
    """For a fairseq encoder or decoder (``self.layers``) whose layers may share their position modules.

    ``init_shared_positions`` before ``nn.Module.__init__`` (the layers that fairseq's ``__init__`` builds
    read ``self.shared_positions``), ``own_shared_positions`` after it; ``one_forward()`` around the
    layers, so the shared tables are made once per forward.
    """

    shared_positions: Optional[PositionModules]

    def init_shared_positions(self, cfg, num_heads: int, embed_dim: int, bidirectional: bool) -> None:
        refuse_fully_sharded_without_cuda()
        # A plain object, so it may be set before nn.Module.__init__.
        self.shared_positions = (
            None if cfg.rpe_per_layer else build_position_modules(cfg, num_heads, embed_dim, bidirectional)
        )

    def own_shared_positions(self) -> None:
        """Register the shared modules here (``self.position_bias``, ...): their one place in the state dict."""
        for slot, module in self.shared_positions.items() if self.shared_positions is not None else ():
            self.add_module(slot, module)

    def one_forward(self):
        """Context in which the layers' attentions share the tables of this forward."""
        return nullcontext() if self.shared_positions is None else self.shared_positions.one_forward()

    def upgrade_state_dict_named(self, state_dict, name):
        """fairseq's hook before loading: the copies of a per-layer-layout checkpoint become the one entry."""
        state_dict = super().upgrade_state_dict_named(state_dict, name) or state_dict
        if self.shared_positions is not None:
            upgrade_per_layer_layout(state_dict, f"{name}." if name else "", [s for s, _ in self.shared_positions.items()])
        return state_dict


def refuse_fully_sharded_without_cuda() -> None:
    """fairseq builds the model inside fairscale's wrapping context for ``--ddp-backend fully_sharded``."""
    try:
        from fairscale.nn.wrap.auto_wrap import ConfigAutoWrap
    except ImportError:  # then fairseq itself refuses fully_sharded, asking for fairscale
        return
    if ConfigAutoWrap.in_autowrap_context and not torch.cuda.is_available():
        raise RuntimeError("--ddp-backend fully_sharded needs CUDA: fairscale's FullyShardedDataParallel runs on GPUs "
                           "only. On CPU use --ddp-backend c10d (the default) or legacy_ddp")
