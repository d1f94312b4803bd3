"""The block whose activation memory notebook 14 derives as a formula, and the measurement that formula is checked
against (in the notebook and by its checks).

``PreNormBlock`` is GPT-2's block: pre-norm, causal attention computed as notebook 04 computes it (scores, a
boolean mask, softmax, then the values), and an MLP four times as wide with GELU; no dropout. It is written with
plain operators so that what autograd keeps can be read off its code; the notebook prints ``forward``.

``kept_bytes`` measures what one forward pass keeps for the backward pass: every tensor autograd saves
(``saved_tensors_hooks``), each storage once (q, k and v are views of one tensor, and a tensor that two operations
save is stored once), the parameters left out (the model holds them whether or not it trains).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from coursetools.memory import saved_for_backward, storage_bytes


class PreNormBlock(nn.Module):
    """x -> x + attention(LayerNorm(x)) -> that + MLP(LayerNorm(that)), on [batch, seq, width] float32 inputs."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))  # [B, h, T, C/h]
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)  # [B, h, T, T]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)  # True where a key is after the query
        probs = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        mixed = (probs @ v).transpose(1, 2).reshape(B, T, C)  # the heads side by side again
        x = x + self.proj(mixed)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


def kept_bytes(block: nn.Module, x: torch.Tensor) -> int:
    """The bytes autograd keeps for the backward pass of ``block(x)``: the distinct storages of the saved tensors,
    the block's parameters left out."""
    parameters = {p.untyped_storage().data_ptr() for p in block.parameters()}
    with saved_for_backward() as saved:
        block(x)
    return storage_bytes([t for t in saved if t.untyped_storage().data_ptr() not in parameters])


def measured_block_bytes(batch: int, seq: int, width: int, heads: int) -> int:
    """``kept_bytes`` of a ``PreNormBlock(width, heads)`` on a float32 input of shape [batch, seq, width] that
    requires a gradient (as a block's input does inside a model)."""
    with torch.random.fork_rng():  # the block's weights are drawn here, and the caller's random stream is left alone
        torch.manual_seed(0)
        block = PreNormBlock(width, heads).float()
        x = torch.randn(batch, seq, width, dtype=torch.float32, requires_grad=True)
    return kept_bytes(block, x)
