"""The tables one attention call reads (:class:`PositionTables`), what makes them (:class:`PositionModules`) and
the base of the modules read by distance (:class:`RelativePositionFunction`).

A position kind acts on attention in one of two places, and gives plain tensors for it:

    scores             b_h(i - j) added to Q K^T            ``by_distance(distance) -> (H, ...)``
                       b_h(i, j) added to Q K^T             ``bias(query_positions, key_positions) -> (H, T, S)``
    queries and keys   q_i, k_j rotated by angles of i, j   ``rotation(positions, dtype) -> (cos, sin)``

Every module acting on the scores has the call shape ``bias(query_positions (T,), key_positions (S,)) ->
(H, T, S)``; a bias of ``i - j`` alone also has ``by_distance`` (:func:`reads_by_distance`), and is then
evaluated once per distance, as a table (the fused kernel and the flex path read only such tables). A
bias of ``(i, j)`` (FIRE) is evaluated at the call's ``T`` query rows, and runs on the dense path.
URPE's ``c_h(i - j)``, multiplied onto the probabilities, is read by distance. Every module is evaluated
once per distance (or position, or query row) a call needs; the attention then only indexes, adds and
multiplies. When all layers share the modules, :meth:`PositionModules.one_forward` makes the tables of
one forward once for all of them.
"""

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

import torch
from torch import Tensor, nn

from .decoding_rows import step_rows
from .reweighted_softmax import expand_by_distance


@dataclass
class PositionTables:
    """What the position modules give one attention call whose ``T`` queries are the last ``T`` of ``S``
    positions (``T = S`` for a full sequence, ``T = 1`` for a decoding step), as plain tensors:

        bias      (H, T + S - 1) or None   b at distances -(T-1) .. S-1: entry e holds distance e - (T - 1)
        pair_bias (H, T, S) or None        b(i, j) of a bias read by position (not by distance): query
                                           positions S-T .. S-1, key positions 0 .. S-1
        reweight  (H, T + S - 1) or None   URPE's c at the same distances
        rotation  ((T, d), (T, d)) or None cos and sin of the angles of positions S-T .. S-1, for
                                           :func:`rotate` of the queries and the new keys
        index     (T, S) long              entry of the distance i - j: ``bias[:, index]`` is B (H, T, S)
        bias_constant_from, reweight_constant_from   int or None: the distance from which ``b`` (``c``)
                  is constant (the module's ``constant_from``)
    """

    tgt_len: int
    src_len: int
    index: Tensor
    bias: Optional[Tensor] = None
    reweight: Optional[Tensor] = None
    rotation: Optional[Tuple[Tensor, Tensor]] = None
    pair_bias: Optional[Tensor] = None
    bias_constant_from: Optional[int] = None
    reweight_constant_from: Optional[int] = None
    _matrices: Dict[str, Tensor] = field(default_factory=dict, repr=False, compare=False)

    def matrix(self, name: str, rows: slice = slice(None), keys: Optional[int] = None) -> Tensor:
        """``bias`` or ``reweight`` as its ``(H, T, S)`` matrix (:func:`expand_by_distance`), or the block of it at
        query ``rows`` and the first ``keys`` keys (:mod:`~fairseq_urpe.modules.causal_blocks`). For one query (a
        decoding step) with no gradient to the table, it is made once for these tables and shared by every
        layer that reads them (its ``(H, 1, S)`` is the table's size); otherwise each reader makes its own, in
        its graph, and frees it when done (a kept ``(H, T, S)`` would add to the peak memory of long inputs)."""
        table = getattr(self, name)
        if rows != slice(None) or keys is not None:
            return expand_by_distance(table, self.index[rows, :keys])
        if self.tgt_len != 1 or (torch.is_grad_enabled() and table.requires_grad):
            return expand_by_distance(table, self.index)
        if name not in self._matrices:
            self._matrices[name] = expand_by_distance(table, self.index)
        return self._matrices[name]

    def score_bias(self, rows: slice = slice(None), keys: Optional[int] = None) -> Optional[Tensor]:
        """The bias added to the scores as its ``(H, T, S)`` matrix (or the block at ``rows`` and the first
        ``keys`` keys), whichever way it is read: ``bias`` by distance (:meth:`matrix`) or ``pair_bias`` of the
        positions; ``None`` without a bias."""
        if self.bias is not None:
            return self.matrix("bias", rows, keys)
        return None if self.pair_bias is None else self.pair_bias[:, rows, :keys]

    def causal(self, table: Optional[Tensor], constant_from: Optional[int] = None) -> Optional[Tensor]:
        """``table`` at distances ``0 .. S - 1`` only, ``(H, S)``; with ``constant_from``, only up to that
        distance, ``(H, min(S, constant_from + 1))``, its last entry standing for every distance past it."""
        if table is None:
            return None
        end = self.tgt_len - 1 + (self.src_len if constant_from is None else min(self.src_len, constant_from + 1))
        return table[:, self.tgt_len - 1 : end]

    def kernel_tables(self) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """``(b, c)`` as the causal kernel reads them: each at distances ``0 ..`` up to where it turns
        constant (its last entry for every distance past it), so the kernel's far tiles skip table reads.
        A bias of ``(i, j)`` has no such table: ``ValueError``."""
        if self.pair_bias is not None:
            raise ValueError("the position bias is a function of (i, j), not of i - j: it has no table by distance")
        return self.causal(self.bias, self.bias_constant_from), self.causal(self.reweight, self.reweight_constant_from)


class RelativePositionFunction(nn.Module):
    """The base of the modules read by distance (the biases ``b``, URPE's ``c``): a per-head ``f_h(i - j)``.

    Subclasses define ``by_distance(distance (...) long) -> (H, ...)``, at least float32;
    ``by_distance(torch.arange(n))`` is the ``(H, n)`` table of causal distances ``0 .. n-1``, and attention
    reads such tables (:class:`PositionTables`). ``forward(query_positions (T,), key_positions (S,)) ->
    (H, T, S)`` is the matrix form, for plots and tests.
    """

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        return self.by_distance(query_positions[:, None] - key_positions[None, :])  # (H, T, S)

    def by_distance(self, distance: Tensor) -> Tensor:
        raise NotImplementedError

    @property
    def longest_distance(self) -> Optional[int]:
        """The longest causal distance ``by_distance`` accepts (``None``: any); farther ones raise ``ValueError``.
        Decoding builds tables up to it ahead of the steps that need them (:mod:`.decoding_rows`), never past it."""
        return None

    @property
    def constant_from(self) -> Optional[int]:
        """The causal distance ``k0`` with ``f_h(k) = f_h(k0)`` for every ``k >= k0`` (``None``: no such
        distance). The fused kernel reads the table only up to it. It depends on the module's options only
        (never on its parameters): :class:`PositionModules` reads it once."""
        return None


def reads_by_distance(module) -> bool:
    """Whether a module (or its class) acting on the scores is a function of ``i - j`` alone, read as a
    table by distance (``by_distance``); otherwise it is called with the query and key positions."""
    return callable(getattr(module, "by_distance", None))


def rotate(x: Tensor, rotation: Tuple[Tensor, Tensor]) -> Tensor:
    """``x`` (..., T, d) with each pair ``(x_m, x_{m + d/2})`` turned by the angle whose ``(cos, sin)``
    (T, d) ``rotation`` holds (both halves of the last dim carry the pair's angle):
    ``x cos + rotate_half(x) sin`` with ``rotate_half(x) = (-x_{d/2..d-1}, x_{0..d/2-1})``."""
    cos, sin = rotation
    half = x.size(-1) // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


# Per thread: {id(PositionModules): {call key: tables}} of the forwards running inside ``one_forward``.
# Module-level rather than an attribute, so PositionModules stays copyable and picklable.
_FORWARDS = threading.local()


def _forwards() -> Dict[int, Dict[tuple, PositionTables]]:
    if not hasattr(_FORWARDS, "memos"):
        _FORWARDS.memos = {}
    return _FORWARDS.memos


class PositionModules:
    """The position modules of one attention, or of all the layers sharing them; each optional:

        position_bias   b added to the scores: ``by_distance`` (T5, ALiBi, log, per distance, KERPLE),
                        or ``bias(query_positions, key_positions)`` (FIRE)
        toeplitz        ``by_distance``: URPE's c multiplied onto the probabilities
        rotary          ``rotation``: q and k rotated by position (RoPE)

    Not an ``nn.Module``: it refers to the modules, whoever owns them registers them (an attention its
    own, an encoder/decoder the ones all its layers share, outside the layers).

    ``tables(T, S, device, dtype)`` evaluates them. Inside ``with modules.one_forward():`` (the decoder
    opens it around fairseq's own layer loop, so no fairseq code is copied) the first call with given
    arguments makes the tables and later calls with the same arguments, in the same thread and grad
    mode, get the same tensors: once per forward, or per decoding step. Outside, every call makes them
    afresh. So:

    - incremental decoding and beam reordering: each step is a forward of its own, ``S`` read from the
      attention's cache; the tables hold no per-sentence state, so reordering the cache is all it takes;
    - several forwards in flight (forward, forward, backward, backward): each forward's layers hold its
      own tables in their autograd graphs; the scope only decides who computes them;
    - activation checkpointing: fairseq's checkpoint runs a layer's forward under ``no_grad`` (it gets
      no-grad tables, keyed apart from grad ones) and recomputes it during backward, outside the scope,
      where it makes its own tables with their graph: the gradients of ``b`` and ``c`` are exact.
    """

    SLOTS = ("position_bias", "toeplitz", "rotary")

    def __init__(self, position_bias: Optional[nn.Module] = None, toeplitz: Optional[nn.Module] = None,
                 rotary: Optional[nn.Module] = None):
        self.position_bias, self.toeplitz, self.rotary = position_bias, toeplitz, rotary
        self._constant_from = None  # (b's, c's) constant_from: they depend on the modules' options only, read once

    def items(self) -> List[Tuple[str, nn.Module]]:
        """``[(slot, module)]`` of the modules present."""
        return [(slot, getattr(self, slot)) for slot in self.SLOTS if getattr(self, slot) is not None]

    @contextmanager
    def one_forward(self) -> Iterator[None]:
        """Share the tables made inside the block among all calls that ask for the same ones."""
        memos, key = _forwards(), id(self)
        outer = memos.get(key)
        memos[key] = {}
        try:
            yield
        finally:
            if outer is None:
                del memos[key]
            else:
                memos[key] = outer

    def tables(self, tgt_len: int, src_len: int, device: torch.device, dtype: torch.dtype) -> PositionTables:
        """The tables for ``tgt_len`` queries at the last of ``src_len`` positions; ``dtype``: that of q
        and k (the rotation's); ``b`` and ``c`` follow their parameters' (at least float32)."""
        memo = _forwards().get(id(self))
        key = (tgt_len, src_len, device, dtype, torch.is_grad_enabled())
        if memo is not None and key in memo:
            return memo[key]
        tables = self._make(tgt_len, src_len, device, dtype)
        if memo is not None:
            memo[key] = tables
        return tables

    def _make(self, tgt_len: int, src_len: int, device: torch.device, dtype: torch.dtype) -> PositionTables:
        if self._constant_from is None:
            # a module of a kind registered elsewhere may not say (None: the kernel reads every distance)
            self._constant_from = tuple(getattr(module, "constant_from", None)
                                        for module in (self.position_bias, self.toeplitz))
        bias_constant_from, reweight_constant_from = self._constant_from
        bias = self.position_bias
        by_distance = bias is not None and reads_by_distance(bias)
        if tgt_len == 1 and not torch.is_grad_enabled() and (bias is None or by_distance):
            # a decoding step: views of tables made once for the modules' current values (decoding_rows)
            modules = {slot: module for slot, module in (("bias", bias), ("reweight", self.toeplitz)) if module is not None}
            step = step_rows(self, modules, src_len, device)
            tables = PositionTables(
                1, src_len, step.index, bias=step.tables.get("bias"), reweight=step.tables.get("reweight"),
                rotation=(self.rotary.rotation(torch.arange(src_len - 1, src_len, device=device), dtype)
                          if self.rotary is not None else None),
                bias_constant_from=bias_constant_from, reweight_constant_from=reweight_constant_from)
            tables._matrices.update(step.rows)  # each table's (H, 1, S) row: what matrix() gives
            return tables
        positions = torch.arange(src_len, device=device)  # key positions 0 .. S-1
        distances = torch.arange(1 - tgt_len, src_len, device=device)  # (T + S - 1,)
        # (T, S) int64: an int32 index would halve its bytes, but makes index_select and index_add_ about
        # 2.5x slower on CPU (torch 2.13), and the attention reads it for every table
        index = positions[src_len - tgt_len :, None] - positions[None, :] + (tgt_len - 1)  # (T, S)
        return PositionTables(
            tgt_len, src_len, index,
            bias=bias.by_distance(distances) if by_distance else None,
            # b(i, j): only the call's query rows (a decoding step: its one row)
            pair_bias=bias(positions[src_len - tgt_len :], positions) if bias is not None and not by_distance else None,
            reweight=self.toeplitz.by_distance(distances) if self.toeplitz is not None else None,
            rotation=self.rotary.rotation(positions[src_len - tgt_len :], dtype) if self.rotary is not None else None,
            bias_constant_from=bias_constant_from, reweight_constant_from=reweight_constant_from,
        )
