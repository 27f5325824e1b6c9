"""Relative-position self-attention: RPE and URPE (Luo et al., NeurIPS 2022).

    q, k = rotate(q, k)                     by their positions, if the kind rotates (RoPE); else as they are
    S    = Q K^T / sqrt(d) + B + M          B_ij = b_h(i - j) (RPE bias; FIRE's b_h(i, j)), M = causal/padding mask
                                            (dot-product-free: S = B + M, Wang & E, NeurIPS 2024)
    A    = softmax(S)                       in float32 for half/bfloat16 inputs (float64 stays float64)
    out  = dropout(A ⊙ C) V                 C_ij = c_h(i - j) (URPE Toeplitz; C = 1 is plain RPE)

``b``, ``c`` and the rotation come as :class:`PositionTables` (plain tensors, per distance or position),
from the position modules the attention owns or shares with other layers. Positions are absolute
indices into the (cached) sequence, so incremental decoding uses the same ``i - j`` (and rotates each key
once, at its own position, before caching it) as the full forward.
"""

from typing import Dict, Optional, Tuple

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from ..kernels.dispatch import StaticDispatch, is_future_mask, pair_bias_path
from .causal_blocks import causal_blocks
from .causal_dense_attention import causal_dense_attention
from .position_tables import PositionModules, PositionTables, rotate
from .precision import at_least_float32
from .reweighted_softmax import softmax_reweight_values


class RelativeMultiheadAttention(MultiheadAttention):
    """Drop-in replacement for fairseq's self-attention with relative positions.

    Subclasses :class:`fairseq.modules.MultiheadAttention` for its projections, initialisation and
    incremental-state cache (``prev_key``/``prev_value`` as ``(B, H, S, d)``, reordered by
    ``reorder_incremental_state``); only ``forward`` is new.

    Args:
        position_bias: module whose bias is added to the scores: ``by_distance`` (H, ...) for a bias of
            ``i - j``, else called with the query and key positions, ``(H, T, S)`` (FIRE); or ``None``.
        toeplitz: module with ``by_distance`` multiplied onto the probabilities (URPE), or ``None`` (RPE).
        rotary: module with ``rotation`` turning q and k by position (RoPE), or ``None``.
        shared: instead of the three, :class:`PositionModules` that other layers use too. Their owner
            (the encoder/decoder) registers them, so they are not parameters of this attention.
        dot_product: ``False`` drops ``Q K^T`` and the query/key projections (``q_proj``, ``k_proj`` are
            ``None``, and no submodules: a state dict holding them is refused by a strict load): the
            attention pattern comes from the position bias alone and is shared by the whole batch.
        attention_impl: ``auto``, ``dense``, ``fused`` or ``flex``: see :mod:`fairseq_urpe.kernels.dispatch`.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        position_bias: Optional[nn.Module] = None,
        toeplitz: Optional[nn.Module] = None,
        dot_product: bool = True,
        dropout: float = 0.0,
        bias: bool = True,
        q_noise: float = 0.0,
        qn_block_size: int = 8,
        attention_impl: str = "auto",
        rotary: Optional[nn.Module] = None,
        shared: Optional[PositionModules] = None,
    ):
        super().__init__(
            embed_dim,
            num_heads,
            dropout=dropout,
            bias=bias,
            self_attention=True,
            q_noise=q_noise,
            qn_block_size=qn_block_size,
        )
        if shared is None:
            self.position_bias, self.toeplitz, self.rotary = position_bias, toeplitz, rotary  # submodules
            self.positions = PositionModules(position_bias, toeplitz, rotary)
        else:
            if position_bias is not None or toeplitz is not None or rotary is not None:
                raise ValueError("give the position modules either one by one or as shared, not both")
            self.positions = shared
            # Plain references, not submodules: the encoder/decoder owns shared modules, outside the layers
            # (which fully-sharded training wraps one by one), and the state dict lists them under it.
            self.__dict__.update((slot, getattr(shared, slot)) for slot in PositionModules.SLOTS)
        if self.positions.rotary is not None and not dot_product:
            raise ValueError("a rotation of q and k needs the dot product: dot-product-free attention has no q, k")
        self.dot_product = dot_product
        self.attention_impl = attention_impl
        if not dot_product:
            # No q, k: not submodules at all (unused parameters would also break DDP's gradient reduction),
            # so a state dict that has them (a checkpoint trained with Q K^T) fails the strict load.
            del self.q_proj, self.k_proj
            self.q_proj = self.k_proj = None  # plain attributes

    def static_dispatch(self, v: Tensor) -> StaticDispatch:
        """The dispatch's configuration-only part (:class:`~fairseq_urpe.kernels.dispatch.StaticDispatch`) for
        calls whose ``v`` (B, H, T, d) has this device, dtype and head dim: resolved at the first such call,
        kept per ``(attention_impl, dot_product, device, dtype, head_dim)``, so a move (``.to()``, ``.half()``),
        a copy or a changed ``attention_impl`` gets its own."""
        key = (self.attention_impl, self.dot_product, v.device, v.dtype, v.size(-1))
        resolved = self.__dict__.setdefault("_static_dispatch", {})
        if key not in resolved:
            resolved[key] = StaticDispatch(self.attention_impl, v.device, v.dtype, v.size(-1), self.dot_product)
        return resolved[key]

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor] = None,
        value: Optional[Tensor] = None,
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
        position_tables: Optional[PositionTables] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """``query``: (T, B, E), time first as in fairseq; ``key``/``value`` must be ``query`` or ``None``.

        ``key_padding_mask``: (B, T) true at pads; ``attn_mask``: (T, S) additive float mask;
        ``position_tables``: tables to use instead of asking the position modules (position_plots.py leaves
        out ``c`` this way). Returns ``(out (T, B, E), weights)`` where ``weights`` is ``A ⊙ C`` averaged
        over heads (B, T, S), per head (H, B, T, S) with ``need_head_weights``, or ``None``.
        """
        if (key is not None and key is not query) or (value is not None and value is not query):
            raise ValueError("RelativeMultiheadAttention is self-attention only: key and value must be the query")
        if static_kv or before_softmax:
            raise ValueError("RelativeMultiheadAttention supports neither static_kv nor before_softmax")
        need_weights = need_weights or need_head_weights
        tgt_len, bsz, embed_dim = query.size()
        heads, head_dim = self.num_heads, self.head_dim

        def split_heads(x: Tensor) -> Tensor:
            return x.view(tgt_len, bsz, heads, head_dim).permute(1, 2, 0, 3)  # (B, H, T, d)

        def project(out: Tensor) -> Tensor:  # (B, H, T, d) -> out_proj of the heads side by side, (T, B, E)
            return self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim))

        v = split_heads(self.v_proj(query))
        q = k = None
        if self.dot_product:
            q = split_heads(self.q_proj(query)) * self.scaling
            k = split_heads(self.k_proj(query))
        saved = self._get_input_buffer(incremental_state) if incremental_state is not None else None
        src_len = tgt_len + (saved["prev_value"].size(2) if saved and "prev_value" in saved else 0)
        tables = position_tables
        if tables is None:  # the tables of this forward, made by the first layer that asks (PositionModules)
            tables = self.positions.tables(tgt_len, src_len, query.device, v.dtype)
        if (tables.tgt_len, tables.src_len) != (tgt_len, src_len):
            raise ValueError(f"position tables for {tables.tgt_len} of {tables.src_len} positions, "
                             f"but this call has {tgt_len} queries of {src_len}")
        if tables.rotation is not None:  # new keys turned at their own positions, before they are cached
            q, k = rotate(q, tables.rotation), rotate(k, tables.rotation)

        if saved is not None:
            if "prev_value" in saved:
                v = torch.cat([saved["prev_value"], v], dim=2)  # (B, H, S, d)
                if k is not None:
                    k = torch.cat([saved["prev_key"], k], dim=2)
            key_padding_mask = self._append_prev_key_padding_mask(
                key_padding_mask, saved.get("prev_key_padding_mask"), bsz, src_len, False
            )
            saved["prev_value"] = v
            if k is not None:
                saved["prev_key"] = k
            saved["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved)

        dropout_active = self.dropout_module.p > 0 and (self.training or self.dropout_module.apply_during_inference)
        dropout_p = self.dropout_module.p if dropout_active else 0.0
        backend = None
        if tables.pair_bias is not None:  # b(i, j) has no table by distance: dense (fused and flex refuse it)
            pair_bias_path(self.attention_impl)
        else:
            # incremental decoding and the weights run dense on every path: then the kernel's tables are not made
            incremental = incremental_state is not None
            kernel_tables = ((None, None) if self.attention_impl == "dense" or incremental or need_weights
                             else tables.kernel_tables())
            backend = self.static_dispatch(v).backend(v, attn_mask, incremental, need_weights, dropout_p, kernel_tables,
                                                      padding=key_padding_mask is not None)
        if backend is not None:
            out = backend.run(q, k, v, *kernel_tables, key_padding_mask, dropout_p=dropout_p)
            if out is not None:  # None: auto, and this launch signature failed its first launch (dense below)
                return project(out), None

        # Under the future mask, blocks of query rows each against the keys they see (causal_blocks); the
        # weights, a decoding step and other masks: one block of every row and key.
        blocks = [(slice(None), None)]
        if incremental_state is None and not need_weights and tgt_len > 1 and is_future_mask(attn_mask, tgt_len):
            blocks = causal_blocks(tgt_len)
            if self.dot_product and not dropout_active and tables.pair_bias is None:  # training's common case
                out = causal_dense_attention(q, k, v, tables.bias, tables.reweight, tables.index, blocks,
                                             key_padding_mask)  # (B, H, T, d)
                return project(out), None
        outs = [self.dense_block(q, k, v, tables, key_padding_mask, attn_mask, rows, keys, need_weights, dropout_active)
                for rows, keys in blocks]
        out, weights = outs[0] if len(outs) == 1 else (torch.cat([o for o, _ in outs], dim=2), None)  # (B, H, T, d)
        out = project(out)  # (T, B, E)

        if not need_weights:
            return out, None
        head_weights = weights.transpose(0, 1)  # (H, B, T, S)
        return out, (head_weights if need_head_weights else head_weights.mean(dim=0))

    def dense_block(self, q: Optional[Tensor], k: Optional[Tensor], v: Tensor, tables: PositionTables,
                    key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor], rows: slice, keys: Optional[int],
                    need_weights: bool, dropout_active: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """The dense attention of query ``rows`` against the first ``keys`` keys (all: ``slice(None)``,
        ``None``): ``(out (B, H, rows, d), weights A ⊙ C (B, H, rows, keys) or None)``; ``q`` (B, H, T, d) scaled,
        ``k``, ``v`` (B, H, S, d)."""
        bsz, heads, index, num_rows = v.size(0), self.num_heads, tables.index, tables.tgt_len
        if keys is None:  # every row and key: the tensors as they are (a decoding step's are ready to use)
            score_bias = tables.score_bias()  # (H, T, S) or None
        else:
            num_rows, index, score_bias = rows.stop - rows.start, index[rows, :keys], tables.score_bias(rows, keys)
            q, k, v = (None if q is None else q[:, :, rows]), (None if k is None else k[:, :, :keys]), v[:, :, :keys]
            key_padding_mask = None if key_padding_mask is None else key_padding_mask[:, :keys]
            attn_mask = None if attn_mask is None else attn_mask[rows, :keys]
        in_place = self.dot_product  # only then is `scores` a fresh (B, H, rows, keys) tensor of our own
        if self.dot_product:
            # In place below: neither matmul, the upcast, add nor masked_fill needs its output for backward.
            scores = at_least_float32(torch.matmul(q, k.transpose(2, 3)))  # (B, H, rows, keys)
            if score_bias is not None:
                scores += score_bias  # (H, rows, keys)
        elif score_bias is not None:
            scores = score_bias[None]  # (1, H, rows, keys)
        else:
            scores = v.new_zeros((1, 1, num_rows, v.size(2)), dtype=torch.promote_types(v.dtype, torch.float32))
        if key_padding_mask is not None:
            # A finite floor, not -inf: a row whose visible keys are all padding (left-padded prompts)
            # stays finite instead of NaN. The causal -inf is added after, so future keys stay excluded.
            pad = key_padding_mask.to(torch.bool)[:, None, None, :]  # (B, 1, 1, keys)
            floor = torch.finfo(scores.dtype).min
            scores = scores.masked_fill_(pad, floor) if in_place else scores.masked_fill(pad, floor)
        if attn_mask is not None:
            mask = at_least_float32(attn_mask)  # (rows, keys)
            scores = scores.add_(mask) if in_place else scores + mask
        if (tables.reweight is not None and self.dot_product and not need_weights and not dropout_active
                and torch.is_grad_enabled()):
            # The same math, keeping only softmax(S) for backward (not also A ⊙ C, C): URPE's memory is RPE's.
            return softmax_reweight_values(scores, tables.reweight, index, v), None
        weights = torch.softmax(scores, dim=-1)  # (B or 1, H or 1, rows, keys), at least float32
        if tables.reweight is not None:
            weights = weights * (tables.matrix("reweight") if keys is None else tables.matrix("reweight", rows, keys))
        weights = weights.expand(bsz, heads, weights.size(2), weights.size(3))  # a view; dropout draws per example
        return torch.matmul(self.dropout_module(weights.to(v.dtype)), v), weights
