"""A language model whose next-token probabilities are known exactly: a lookup table indexed by the prefix.

``PrefixTableModel(table)`` with ``table`` ``[rows, vocab]``: the logits after the real tokens
``t_0 .. t_i`` are ``table[h_i]``, where ``h_i = (h_{i-1} * 31 + t_i + 1) mod rows`` and ``h_{-1} = 0``.
``forward(tokens, padding_mask=None) -> logits [batch, seq, vocab]``; positions where ``padding_mask``
is False leave the hash unchanged (so a left-padded prompt gives exactly the logits it gives alone, and
padding without the mask gives others). ``next_logits(prefix)`` is the same for one prefix (a list of ints),
for brute-force enumeration.
"""

from __future__ import annotations

import torch
from torch import nn


class PrefixTableModel(nn.Module):
    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.register_buffer("table", table.clone())

    def _step(self, h, token):
        return (h * 31 + token + 1) % self.table.shape[0]

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        tokens = torch.as_tensor(tokens)
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [batch, seq], got shape {list(tokens.shape)}")
        h = torch.zeros(tokens.shape[0], dtype=torch.long)
        rows = []
        for i in range(tokens.shape[1]):
            new = self._step(h, tokens[:, i].long())
            h = new if padding_mask is None else torch.where(padding_mask[:, i], new, h)
            rows.append(self.table[h])
        return torch.stack(rows, dim=1)

    def next_logits(self, prefix) -> torch.Tensor:
        h = 0
        for token in prefix:
            h = self._step(h, int(token))
        return self.table[h]
