"""The original encoder-decoder Transformer around ``torch.nn.Transformer`` (notebook 09's interface).

``EncoderDecoder(config)`` with ``encode(src, src_padding=None)``, ``decode(tgt, memory, tgt_padding=None,
memory_padding=None)`` and ``forward(src, tgt, src_padding=None, tgt_padding=None)``: embeddings scaled
by sqrt(d_model) plus the sinusoidal table, ``nn.Transformer``'s two stacks (with their final norms),
a linear output layer. Padding masks are boolean ``[batch, seq]``, True = real token (PyTorch's masks
say True = hidden, so they are inverted here). Used as the fallback of notebook 10's demo; its parameter
names are PyTorch's, not the course's.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from autograder.reference.positions import SinusoidalPositionalEncoding


def _hidden(padding: torch.Tensor | None) -> torch.Tensor | None:
    return None if padding is None else ~padding


class EncoderDecoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.src_embed = nn.Embedding(config.src_vocab_size, config.d_model)
        self.tgt_embed = (
            self.src_embed if config.share_embeddings else nn.Embedding(config.tgt_vocab_size, config.d_model)
        )
        self.positions = SinusoidalPositionalEncoding(config.max_len, config.d_model)
        self.transformer = nn.Transformer(
            config.d_model,
            config.n_heads,
            config.n_encoder_layers,
            config.n_decoder_layers,
            config.d_ff,
            dropout=0.0,
            activation=config.activation,
            batch_first=True,
            norm_first=config.norm_first,
        )
        self.out_proj = nn.Linear(config.d_model, config.tgt_vocab_size)
        if config.share_embeddings:
            self.out_proj.weight = self.tgt_embed.weight

    def _embed(self, table: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return table(tokens) * math.sqrt(self.config.d_model) + self.positions(positions)

    def encode(self, src: torch.Tensor, src_padding: torch.Tensor | None = None) -> torch.Tensor:
        return self.transformer.encoder(self._embed(self.src_embed, src), src_key_padding_mask=_hidden(src_padding))

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        tgt_padding: torch.Tensor | None = None,
        memory_padding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        length = tgt.shape[1]
        causal = ~torch.ones(length, length, dtype=torch.bool, device=tgt.device).tril()
        hidden = self.transformer.decoder(
            self._embed(self.tgt_embed, tgt),
            memory,
            tgt_mask=causal,
            tgt_key_padding_mask=_hidden(tgt_padding),
            memory_key_padding_mask=_hidden(memory_padding),
        )
        return self.out_proj(hidden)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_padding: torch.Tensor | None = None,
        tgt_padding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.decode(tgt, self.encode(src, src_padding), tgt_padding, src_padding)
