"""Transformer blocks with the course's parameter names, built from the reference components.

Notebook 07's interfaces: ``PreNormBlock(d_model, num_heads, d_ff, activation)`` with ``norm1``,
``attn``, ``norm2``, ``ffn``; ``EncoderBlock`` (``self_attn``, ``norm1``, ``ffn``, ``norm2``,
``norm_first``) with ``forward(x, padding_mask=None)``; ``DecoderBlock`` (adds ``cross_attn`` and
``norm3``) with ``forward(x, memory, tgt_padding=None, memory_padding=None)``. Padding masks are
boolean ``[batch, seq]``, True = real token. The checks of later notebooks put these inside the
student's models, so that a model is graded on its own and not on the student's blocks.
"""

from __future__ import annotations

import torch
from torch import nn

from autograder.reference.attention import CrossAttention, MultiHeadAttention
from autograder.reference.feed_forward import FeedForward


def _keys(padding: torch.Tensor | None) -> torch.Tensor | None:
    """A [batch, seq] padding mask as an attention mask over keys, [batch, 1, 1, seq]."""
    return None if padding is None else padding[:, None, None, :]


class PreNormBlock(nn.Module):
    """``x + attn(norm1(x), mask)``, then ``+ ffn(norm2(x))``, composed from the parts it is given.

    Not PyTorch's ``nn.TransformerEncoderLayer(norm_first=True)``, which computes the same composition: that layer
    builds its own parts (``self_attn`` with a fused ``in_proj_weight``, ``linear1``/``linear2``, its LayerNorms),
    turns a boolean mask into an additive one of the opposite polarity (True = masked) before its sublayers see it,
    and reads ``self_attn``'s fused weights on its eval-mode fast path. The checks need a block whose parts are made
    by the ``attention``, ``feed_forward`` and ``norm`` arguments (recording stand-ins, a norm with GPT-2's eps) under
    the course's names (``attn.q_proj``, ``ffn.fc1``, ...) and that hands the course's mask (True = may attend) to
    its attention as it is. What is left is two residual additions: the definition of a pre-norm block, which any
    correct answer writes the same way.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        activation: str = "relu",
        *,
        attention=MultiHeadAttention,
        feed_forward=FeedForward,
        norm=nn.LayerNorm,
    ):
        super().__init__()
        self.norm1, self.norm2 = norm(d_model), norm(d_model)
        self.attn = attention(d_model, num_heads)
        self.ffn = feed_forward(d_model, d_ff, activation)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), mask)
        return x + self.ffn(self.norm2(x))


class EncoderBlock(nn.Module):
    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        activation: str = "relu",
        norm_first: bool = False,
        *,
        attention=MultiHeadAttention,
        feed_forward=FeedForward,
        norm=nn.LayerNorm,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = attention(d_model, num_heads)
        self.ffn = feed_forward(d_model, d_ff, activation)
        self.norm1, self.norm2 = norm(d_model), norm(d_model)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        steps = ((self.norm1, lambda h: self.self_attn(h, _keys(padding_mask))), (self.norm2, self.ffn))
        for norm, sublayer in steps:
            x = x + sublayer(norm(x)) if self.norm_first else norm(x + sublayer(x))
        return x


class DecoderBlock(nn.Module):
    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        activation: str = "relu",
        norm_first: bool = False,
        *,
        attention=MultiHeadAttention,
        cross_attention=CrossAttention,
        feed_forward=FeedForward,
        norm=nn.LayerNorm,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = attention(d_model, num_heads)
        self.cross_attn = cross_attention(d_model, num_heads)
        self.ffn = feed_forward(d_model, d_ff, activation)
        self.norm1, self.norm2, self.norm3 = norm(d_model), norm(d_model), norm(d_model)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_padding: torch.Tensor | None = None,
        memory_padding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).tril()
        self_mask = causal if tgt_padding is None else causal & _keys(tgt_padding)
        steps = (
            (self.norm1, lambda h: self.self_attn(h, self_mask)),
            (self.norm2, lambda h: self.cross_attn(h, memory, _keys(memory_padding))),
            (self.norm3, self.ffn),
        )
        for norm, sublayer in steps:
            x = x + sublayer(norm(x)) if self.norm_first else norm(x + sublayer(x))
        return x
