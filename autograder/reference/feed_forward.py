"""The position-wise feed-forward network with the course's interface, from PyTorch's own modules.

``FeedForward(d_model, d_ff, activation="gelu", bias=True, dropout=0.0)``: an ``nn.Sequential`` of
``fc1`` (``nn.Linear`` d_model -> d_ff), ``activation`` (``nn.ReLU``, ``nn.GELU`` or ``nn.GELU(approximate="tanh")``),
``fc2`` (``nn.Linear`` d_ff -> d_model) and ``dropout`` (``nn.Dropout``): the output is
``dropout(fc2(activation(fc1(x))))``. The parameters keep the course's names (``fc1.weight``, ``fc1.bias``,
``fc2.weight``, ``fc2.bias``), since the checks load states into it by name, and ``ffn.fc1`` is still an attribute.

``SwiGLU(d_model, d_ff, bias=False)``: ``w1`` (gate) and ``w3`` (up) map d_model -> d_ff, ``w2``
(down) d_ff -> d_model; the output is ``w2(silu(w1(x)) * w3(x))``.
"""

from __future__ import annotations

import functools
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

# PyTorch's activation modules by the course's names; "gelu_tanh" is GPT-2's tanh approximation.
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "gelu_tanh": functools.partial(nn.GELU, approximate="tanh")}


class FeedForward(nn.Sequential):
    """PyTorch's layers chained by ``nn.Sequential``: the forward pass is Sequential's own, not written here.

    A class rather than a function returning an ``nn.Sequential``: notebook 07's checks subclass it (an FFN whose
    output is scaled) and the notebooks call it by this name. The layers are made in the order fc1, fc2, so a
    seeded model draws the same weights as before.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", bias: bool = True, dropout: float = 0.0):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        layers = OrderedDict(
            fc1=nn.Linear(d_model, d_ff, bias=bias),
            activation=ACTIVATIONS[activation](),
            fc2=nn.Linear(d_ff, d_model, bias=bias),
            dropout=nn.Dropout(dropout),
        )
        super().__init__(layers)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w3 = nn.Linear(d_model, d_ff, bias=bias)
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
