"""Position modules built once per encoder/decoder from the options, and handed to its layers.

By default (T5, Luo et al.) one ``b`` and one ``c`` serve every layer: the encoder/decoder builds them
before its layers, owns them (outside the layers, so ``--ddp-backend fully_sharded``, which wraps each
layer on its own, can still shard them) and passes them to each layer as fairseq's Linformer plugin
passes its shared compression layer. With ``--rpe-per-layer`` each layer's attention builds and owns its
own.

Checkpoints list the shared modules under every layer's ``self_attn``, as equal copies (the layout of
every checkpoint written so far), so old and new checkpoints load in either code.

fairscale's FullyShardedDataParallel needs CUDA; on CPU, where fairseq would fail deep inside fairscale
(for its own models too), building refuses ``--ddp-backend fully_sharded`` by name.
"""

import re
from contextlib import nullcontext
from typing import Optional

import torch
from torch import nn

from ..modules import PositionModules, RelativeMultiheadAttention, ToeplitzReweighting
from .position_kinds import POSITION_KINDS, QUERIES_KEYS, KindOptions, kinds_with_slopes


def build_position_modules(cfg, num_heads: int, embed_dim: int, bidirectional: bool) -> PositionModules:
    """``--rpe-kind``'s module and URPE's ``c`` for attention of ``num_heads`` heads over ``embed_dim``;
    raises ``ValueError`` naming the option on impossible combinations."""
    name, slopes = str(cfg.rpe_kind), cfg.rpe_slopes
    if name not in POSITION_KINDS:
        raise ValueError(f"--rpe-kind must be one of {', '.join(POSITION_KINDS)}; got {name!r}")
    kind = POSITION_KINDS[name]
    if slopes is not None and kind.slopes is None:
        raise ValueError(f"--rpe-slopes applies to --rpe-kind {' or '.join(kinds_with_slopes())}; "
                         f"--rpe-kind {name} has no slopes")
    if cfg.dot_product_free and not kind.dot_product_free:
        raise ValueError(f"--rpe-kind {name} acts on q and k, which --dot-product-free removes; "
                         f"choose another --rpe-kind or drop --dot-product-free")
    options = KindOptions(num_heads, embed_dim // num_heads, bidirectional, cfg.rpe_num_buckets, cfg.rpe_max_distance,
                          learnable_slopes=str(slopes or kind.slopes) == "learned", bias_start=str(cfg.rpe_init))
    module = kind.build(options)
    slot = "rotary" if kind.acts_on == QUERIES_KEYS else "position_bias"
    return PositionModules(**{slot: module}, toeplitz=build_toeplitz(cfg, num_heads, bidirectional))


def build_toeplitz(cfg, num_heads: int, bidirectional: bool) -> Optional[ToeplitzReweighting]:
    """URPE's ``c`` of ``--urpe-toeplitz`` (``None`` for 'none', i.e. RPE)."""
    if cfg.urpe_toeplitz == "none":
        return None
    if cfg.urpe_toeplitz == "bucketed":
        return ToeplitzReweighting(num_heads, "bucketed", cfg.rpe_num_buckets, cfg.rpe_max_distance, bidirectional)
    if cfg.urpe_max_distance is None:
        raise ValueError("--urpe-toeplitz unique needs --urpe-max-distance (or --tokens-per-sample)")
    return ToeplitzReweighting(num_heads, str(cfg.urpe_toeplitz), max_distance=cfg.urpe_max_distance,
                               bidirectional=bidirectional, beyond_max=str(cfg.urpe_beyond_max))


def relative_self_attention(layer, cfg, embed_dim: int, num_heads: int, shared: Optional[PositionModules],
                            bidirectional: bool) -> RelativeMultiheadAttention:
    """A layer's self-attention: the ``shared`` position modules, else its own, built from ``cfg``."""
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
        """Register the shared modules here (``self.position_bias``, ...), with the checkpoint layout's hooks."""
        if self.shared_positions is None:
            return
        for slot, module in self.shared_positions.items():
            self.add_module(slot, module)
        self.register_state_dict_post_hook(_write_under_every_layer)
        self.register_load_state_dict_pre_hook(_read_from_the_layers)

    def one_forward(self):
        """Context in which the layers' attentions share the tables of this forward."""
        return nullcontext() if self.shared_positions is None else self.shared_positions.one_forward()

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        """``nn.Module.named_modules`` with the shared modules listed where every checkpoint written before
        they moved out of the layers had them: right after layer 0's attention.

        Parameters are enumerated through ``named_modules`` (``parameters()`` of this module, of the model
        and of any wrapper, e.g. DDP), and optimizer states are stored by parameter order (fairseq's flat
        fp16/bf16 optimizer as one flat vector of Adam moments): in this order, runs started with the
        earlier layout resume with each moment on its own parameter. Names are unchanged.
        """
        listed = list(super().named_modules(memo, prefix, remove_duplicate))
        if self.shared_positions is None:
            return iter(listed)
        dot = f"{prefix}." if prefix else ""
        shared = tuple(f"{dot}{slot}" for slot, _ in self.shared_positions.items())
        is_shared = [name in shared or name.startswith(tuple(f"{s}." for s in shared)) for name, _ in listed]
        moved = [entry for entry, s in zip(listed, is_shared) if s]
        kept = [entry for entry, s in zip(listed, is_shared) if not s]
        attention = f"{dot}layers.0.self_attn"
        anchor = [i for i, (name, _) in enumerate(kept) if name == attention or name.startswith(f"{attention}.")]
        if not moved or not anchor:
            return iter(listed)
        return iter(kept[: anchor[-1] + 1] + moved + kept[anchor[-1] + 1 :])


def refuse_fully_sharded_without_cuda() -> None:
    """fairseq builds the model inside fairscale's wrapping context for ``--ddp-backend fully_sharded``."""
    try:
        from fairscale.nn.wrap.auto_wrap import ConfigAutoWrap
    except ImportError:  # then fairseq itself refuses fully_sharded, asking for fairscale
        return
    if ConfigAutoWrap.in_autowrap_context and not torch.cuda.is_available():
        raise RuntimeError("--ddp-backend fully_sharded needs CUDA: fairscale's FullyShardedDataParallel runs on GPUs "
                           "only. On CPU use --ddp-backend c10d (the default) or legacy_ddp")


def _layer_key(prefix: str, layer: int, slot: str, rest: str) -> str:
    return f"{prefix}layers.{layer}.self_attn.{slot}.{rest}"


def _write_under_every_layer(module, state_dict, prefix, local_metadata) -> None:
    """State-dict hook: ``{prefix}{slot}.X`` becomes ``{prefix}layers.<i>.self_attn.{slot}.X`` for every layer.

    Layer 0's entry is the tensor itself, the others are copies: fairseq's EMA (``--store-ema``) updates
    every entry in place, and entries that were one tensor would be decayed once per layer. (With
    ``keep_vars=True`` every entry is the parameter itself.)
    """
    for slot, _ in module.shared_positions.items():
        for key in [k for k in state_dict if k.startswith(f"{prefix}{slot}.")]:
            value = state_dict.pop(key)
            for layer in range(len(module.layers)):
                copy = value if layer == 0 or isinstance(value, nn.Parameter) else value.clone()
                state_dict[_layer_key(prefix, layer, slot, key[len(prefix) + len(slot) + 1 :])] = copy


def _read_from_the_layers(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                          error_msgs) -> None:
    """Load hook, the inverse of :func:`_write_under_every_layer`: the layers' copies, which must agree,
    become ``{prefix}{slot}.X``."""
    for slot, _ in module.shared_positions.items():
        pattern = re.compile(re.escape(prefix) + r"layers\.(\d+)\.self_attn\." + re.escape(slot) + r"\.(.+)")
        copies = {}
        for key in list(state_dict):
            match = pattern.fullmatch(key)
            if match:
                copies.setdefault(match.group(2), []).append(state_dict.pop(key))
        for rest, values in copies.items():
            if any(not torch.equal(v, values[0]) for v in values[1:]):
                raise ValueError(
                    f"the checkpoint holds a different {prefix}layers.<i>.self_attn.{slot}.{rest} in each layer "
                    f"(trained with --rpe-per-layer?) but this model shares one set: load it with --rpe-per-layer"
                )
            state_dict[f"{prefix}{slot}.{rest}"] = values[0]

