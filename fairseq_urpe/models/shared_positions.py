"""Position modules built once per encoder/decoder from the options, and handed to its layers.

By default (T5, Luo et al.) one ``b`` and one ``c`` serve every layer: the encoder/decoder builds them
before its layers (:func:`~.position_builders.build_position_modules`), owns them (outside the layers, so
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

from ..kernels.dispatch import pair_bias_refusal
from ..modules import PositionModules, RelativeMultiheadAttention
from .checkpoint_upgrade import ORDER_MARK, mark_per_layer_order, per_layer_order, upgrade_per_layer_layout
from .position_builders import build_position_modules
from .position_kinds import position_kind
from .position_record import RECORD, check_finite_tables, check_same_function, decode, encode, function_settings


def relative_self_attention(layer, cfg, embed_dim: int, num_heads: int, shared: Optional[PositionModules],
                            bidirectional: bool) -> RelativeMultiheadAttention:
    """A layer's self-attention: the ``shared`` position modules, else its own, built from ``cfg``."""
    if str(cfg.urpe_attention_impl) == "flex" and cfg.attention_dropout > 0:
        raise ValueError(f"--urpe-attention-impl flex: flex_attention has no attention dropout, and --attention-dropout "
                         f"is {cfg.attention_dropout}; set it to 0, or use --urpe-attention-impl auto, fused or dense")
    kind, refusal = position_kind(cfg), pair_bias_refusal(str(cfg.urpe_attention_impl))
    if refusal is not None and not kind.fused_kernel:  # a bias of (i, j): no table by distance
        raise ValueError(f"--rpe-kind {cfg.rpe_kind} with {refusal}")
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
        # Plain objects, so they may be set before nn.Module.__init__.
        self.shared_positions = (
            None if cfg.rpe_per_layer else build_position_modules(cfg, num_heads, embed_dim, bidirectional)
        )
        if cfg.rpe_per_layer:
            refuse_per_layer_without_tables(cfg, build_position_modules(cfg, num_heads, embed_dim, bidirectional))
        self._position_settings = function_settings(cfg)

    def own_shared_positions(self) -> None:
        """Register the shared modules here (``self.position_bias``, ...): their one place in the state dict;
        and the record of the position settings (:mod:`.position_record`)."""
        for slot, module in self.shared_positions.items() if self.shared_positions is not None else ():
            self.add_module(slot, module)
        self.register_buffer(RECORD, encode(self._position_settings))

    def one_forward(self):
        """Context in which the layers' attentions share the tables of this forward."""
        return nullcontext() if self.shared_positions is None else self.shared_positions.one_forward()

    def upgrade_state_dict_named(self, state_dict, name):
        """fairseq's hook before loading: the copies of a per-layer-layout checkpoint become the one entry,
        and this model takes that layout's parameter order (:mod:`.checkpoint_upgrade`), as does a model
        loading a checkpoint saved by one that did."""
        state_dict = super().upgrade_state_dict_named(state_dict, name) or state_dict
        prefix = f"{name}." if name else ""
        check_finite_tables(state_dict, prefix)
        if f"{prefix}{RECORD}" in state_dict:
            check_same_function(decode(state_dict[f"{prefix}{RECORD}"]), self._position_settings)
        state_dict[f"{prefix}{RECORD}"] = getattr(self, RECORD).clone()  # this model's, for the strict load
        if self.shared_positions is not None:
            moved = upgrade_per_layer_layout(state_dict, prefix, [s for s, _ in self.shared_positions.items()])
            if moved or f"{prefix}{ORDER_MARK}" in state_dict:
                mark_per_layer_order(self, state_dict, prefix)
        return state_dict

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """nn.Module's, in the per-layer layout's order once a checkpoint of that layout was loaded (the
        order ``parameters()`` and so the optimizer follow, also through a distributed wrapper)."""
        modules = super().named_modules(memo, prefix, remove_duplicate)
        if ORDER_MARK not in self._buffers or self.shared_positions is None or not len(self.layers):
            yield from modules
            return
        first = self.layers[0]
        attention = getattr(first, "self_attn", None)
        yield from per_layer_order(list(modules), [m for _, m in self.shared_positions.items()], attention, prefix)


def refuse_per_layer_without_tables(cfg, modules: PositionModules) -> None:
    """``--rpe-per-layer`` learns each layer's tables apart: refused where there is nothing learned to share."""
    if not any(p.requires_grad for _, module in modules.items() for p in module.parameters()):
        raise ValueError(f"--rpe-per-layer learns b and c in every layer apart, but --rpe-kind {cfg.rpe_kind} with "
                         f"--urpe-toeplitz {cfg.urpe_toeplitz} learns no position table: drop --rpe-per-layer")


def refuse_fully_sharded_without_cuda() -> None:
    """fairseq builds the model inside fairscale's wrapping context for ``--ddp-backend fully_sharded``."""
    try:
        from fairscale.nn.wrap.auto_wrap import ConfigAutoWrap
    except ImportError:  # then fairseq itself refuses fully_sharded, asking for fairscale
        return
    if ConfigAutoWrap.in_autowrap_context and not torch.cuda.is_available():
        raise RuntimeError("--ddp-backend fully_sharded needs CUDA: fairscale's FullyShardedDataParallel runs on GPUs "
                           "only. On CPU use --ddp-backend c10d (the default) or legacy_ddp")
