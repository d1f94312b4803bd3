"""The position-wise feed-forward network with the course's interface, on ``F.relu`` and ``F.gelu``.

``FeedForward(d_model, d_ff, activation="gelu", bias=True, dropout=0.0)``: ``fc1`` and ``fc2`` are
``nn.Linear`` layers; the output is ``dropout(fc2(activation(fc1(x))))``.

``SwiGLU(d_model, d_ff, bias=False)``: ``w1`` (gate) and ``w3`` (up) map d_model -> d_ff, ``w2``
(down) d_ff -> d_model; the output is ``w2(silu(w1(x)) * w3(x))``.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": functools.partial(F.gelu, approximate="tanh")}


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", bias: bool = True, dropout: float = 0.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = ACTIVATIONS[activation]
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(self.activation(self.fc1(x))))


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w3 = nn.Linear(d_model, d_ff, bias=bias)
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
