"""The fixed sine/cosine position table with notebook 01's interface.

``SinusoidalPositionalEncoding(max_len, d_model)`` keeps the table in the non-persistent buffer
``pe`` ``[max_len, d_model]``, with ``pe[p, 2i] = sin(p * w_i)`` and ``pe[p, 2i + 1] = cos(p * w_i)``
for ``w_i = 10000^(-2i / d_model)``; ``forward(positions)`` returns ``pe[positions]``.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class SinusoidalPositionalEncoding(nn.Module):
    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        column = torch.arange(d_model)
        frequency = torch.exp(-(column - column % 2).double() * (math.log(10000.0) / d_model))
        angle = torch.arange(max_len).double()[:, None] * frequency[None, :]
        table = torch.where(column % 2 == 0, angle.sin(), angle.cos())
        self.register_buffer("pe", table.to(torch.get_default_dtype()), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.pe[positions]
