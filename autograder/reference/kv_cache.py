"""Key/value caches for the reference decoder (``decoders.LlamaDecoder(..., cache=...)``).

``KVCache(n_layers)``: one batch that grows together. ``update(layer, k, v)`` appends ``k`` and ``v``
(``[batch, kv_heads, new, head_dim]``) along the sequence axis and returns everything stored for that
layer; ``length`` is the number of positions stored (0 when empty). The new tokens' positions continue from
``length`` and a new token may attend to every cached position and to the new ones up to itself.

``SlotCache(n_layers, n_slots, max_len, kv_heads, head_dim)``: continuous batching. Every slot has its own
length and its keys sit at the start of its row of a fixed buffer; ``rows`` (set by the caller) chooses the
slots that run now, each with one new token at its own position; padded buffer positions are masked out.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, n_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        if self.keys[layer] is not None:
            k, v = torch.cat([self.keys[layer], k], dim=2), torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def positions_and_mask(self, tokens: torch.Tensor, padding_mask=None):
        if padding_mask is not None:
            raise ValueError("KVCache holds one batch of equal lengths: no padding_mask")
        offset, new = self.length, tokens.shape[1]
        positions = torch.arange(offset, offset + new, device=tokens.device)
        mask = torch.ones(new, offset + new, dtype=torch.bool, device=tokens.device).tril(diagonal=offset)
        return positions, mask

    def advance(self, new: int) -> None:  # the length is read off the stored keys
        pass


class SlotCache:
    def __init__(self, n_layers: int, n_slots: int, max_len: int, kv_heads: int, head_dim: int):
        shape = (n_slots, kv_heads, max_len, head_dim)
        self.keys = [torch.zeros(shape) for _ in range(n_layers)]
        self.values = [torch.zeros(shape) for _ in range(n_layers)]
        self.lengths = torch.zeros(n_slots, dtype=torch.long)
        self.rows = torch.arange(n_slots)
        self.max_len = max_len

    def load(self, slot: int, cache: KVCache) -> None:
        """Put one sequence's cache (batch 1) into ``slot``, replacing what was there."""
        n = cache.length
        for layer, (k, v) in enumerate(zip(cache.keys, cache.values, strict=True)):
            self.keys[layer][slot, :, :n] = k[0]
            self.values[layer][slot, :, :n] = v[0]
        self.lengths[slot] = n

    def positions_and_mask(self, tokens: torch.Tensor, padding_mask=None):
        if tokens.shape[1] != 1 or padding_mask is not None:
            raise ValueError("SlotCache runs one new token per slot")
        lengths = self.lengths[self.rows]
        if int(lengths.max()) >= self.max_len:
            raise ValueError(f"a slot is full ({self.max_len} positions)")
        mask = torch.arange(self.max_len)[None, :] <= lengths[:, None]  # cached positions and the new one
        return lengths[:, None], mask[:, None, None, :]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        at = self.lengths[self.rows]
        self.keys[layer][self.rows, :, at] = k[:, :, 0]
        self.values[layer][self.rows, :, at] = v[:, :, 0]
        return self.keys[layer][self.rows], self.values[layer][self.rows]

    def advance(self, new: int) -> None:
        self.lengths[self.rows] += new
