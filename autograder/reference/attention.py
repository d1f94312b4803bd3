"""Multi-head self- and cross-attention with the course's interface, on ``F.scaled_dot_product_attention``.

``MultiHeadAttention(d_model, num_heads)`` and ``CrossAttention(d_model, num_heads)``: ``q_proj``,
``k_proj``, ``v_proj`` and ``out_proj`` are ``nn.Linear(d_model, d_model)`` with bias. Masks are
boolean, True = may attend, broadcast against ``[batch, heads, q_len, k_len]``; a query whose keys
are all masked gets zero weights, so its output is ``out_proj``'s bias.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CrossAttention(nn.Module):
    """Queries from ``x``, keys and values from ``context``: ``forward(x, context, mask=None)``."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model) for _ in range(4))

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        batch, length, width = t.shape
        return t.view(batch, length, self.num_heads, width // self.num_heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(context)), self._heads(self.v_proj(context))
        empty = None
        if mask is not None:  # a query with no key to attend to: zero weights (SDPA would give NaN)
            empty = ~mask.any(-1, keepdim=True)
            mask = mask | empty
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if empty is not None:
            out = out.masked_fill(empty, 0.0)
        return self.out_proj(out.transpose(1, 2).flatten(2))


class MultiHeadAttention(CrossAttention):
    """Self-attention: ``forward(x, mask=None)``."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(x, x, mask)


def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """PyTorch's ``F.scaled_dot_product_attention`` on its math path, which builds the whole ``[q_len, k_len]``
    matrix of scores and keeps the probabilities for backward, as notebook 04's attention does (notebook 14's
    fallback for it, so that its memory comparison stays one with quadratic attention). mask: True = may attend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
