"""Whole decoder models with the course's parameter names, built from the reference components.

``GPT2(config)``: ``wte``, ``wpe``, ``blocks`` (``PreNormBlock`` with ``FeedForward(...,
"gelu_tanh")`` and LayerNorms of ``config.norm_eps``), ``ln_f``, ``lm_head`` tied to ``wte``.
``LlamaDecoder(config)``: ``tok_emb``, ``blocks`` (``ModernBlock`` sharing one ``RoPE``), ``norm``,
``lm_head`` (untied). Both: ``forward(tokens, padding_mask=None) -> logits``; ``padding_mask`` is
boolean ``[batch, seq]``, True = real token; positions count real tokens only
(``cumsum - 1``, so a left-padded sequence starts at 0); the attention mask is causal AND the
padding on the key axis.

The checks load a state dict into these models by name (a student's converted checkpoint), so a
converted state is judged by the logits it gives, not by how the conversion was written.
``LlamaDecoder.forward(tokens, padding_mask=None, cache=None)``: given a cache (``autograder.reference.
kv_cache``: ``KVCache`` for one growing batch, ``SlotCache`` for continuous batching), the cache says the
positions of the new tokens and the mask over all the keys (``cache.positions_and_mask(tokens,
padding_mask)``), every attention appends its keys and values to it, and ``cache.advance(length)`` runs
after the last block. Without a cache nothing changes. Without a cache and without padding the blocks get
``mask=None, is_causal=True`` (the causal mask without a tensor, so SDPA may pick a flash kernel).

``run(tokens, positions, mask)`` is the body of ``forward`` with the positions and the mask given,
so a check can also compute what a known mistake (positions 0..seq-1 under padding, no causal mask)
gives.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from autograder.reference.blocks import PreNormBlock
from autograder.reference.modern import ModernBlock
from autograder.reference.rope import RoPE


def positions_and_mask(tokens: torch.Tensor, padding_mask: torch.Tensor | None):
    """The course's conventions: positions of the real tokens and the causal-and-padding mask."""
    length = tokens.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()
    if padding_mask is None:
        return torch.arange(length, device=tokens.device), causal
    return (padding_mask.long().cumsum(-1) - 1).clamp(min=0), causal & padding_mask[:, None, None, :]


class GPT2(nn.Module):
    def __init__(self, config, activation: str = "gelu_tanh"):
        super().__init__()
        d = config.d_model
        self.wte = nn.Embedding(config.vocab_size, d)
        self.wpe = nn.Embedding(config.n_positions, d)
        norm = functools.partial(nn.LayerNorm, eps=config.norm_eps)
        self.blocks = nn.ModuleList(
            PreNormBlock(d, config.n_heads, config.d_ff, activation, norm=norm) for _ in range(config.n_layers)
        )
        self.ln_f = nn.LayerNorm(d, eps=config.norm_eps)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def run(self, tokens, positions, mask):
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x, mask)
        return self.lm_head(self.ln_f(x))

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.run(tokens, *positions_and_mask(tokens, padding_mask))


class LlamaDecoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = config.d_model
        self.tok_emb = nn.Embedding(config.vocab_size, d)
        rope = RoPE(d // config.n_heads, config.max_seq_len, config.rope_base)
        self.blocks = nn.ModuleList(ModernBlock(config, rope) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(d, eps=config.norm_eps)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)

    def run(self, tokens, positions, mask, cache=None, is_causal=False):
        x = self.tok_emb(tokens)
        for i, block in enumerate(self.blocks):
            extra = {} if cache is None else {"cache": cache, "layer": i}
            x = block(x, mask, positions, is_causal=is_causal, **extra)
        return self.lm_head(self.norm(x))

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        if cache is None and padding_mask is None:
            return self.run(tokens, torch.arange(tokens.shape[1], device=tokens.device), None, is_causal=True)
        if cache is None:
            return self.run(tokens, *positions_and_mask(tokens, padding_mask))
        logits = self.run(tokens, *cache.positions_and_mask(tokens, padding_mask), cache=cache)
        cache.advance(tokens.shape[1])
        return logits
