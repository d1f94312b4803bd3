"""BERT's input embeddings and masked-language-model head with the course's names (notebook 09).

``BertEmbeddings(config, *, norm=nn.LayerNorm)``: ``word``, ``position`` and ``token_type`` tables
(``nn.Embedding``) and ``norm = norm(d_model, eps=config.norm_eps)``; the output is the norm of the
sum of the three lookups (token types default to 0), without dropout.

``MLMHead(config, word_embeddings, *, norm=nn.LayerNorm)``: ``dense`` (d_model -> d_model), exact
GELU, ``norm``, then ``decoder``, a linear map to the vocabulary whose weight is the word embedding
table itself and whose bias is its own.

``config`` is any object with the fields of the notebook's ``BertConfig`` (``vocab_size``,
``d_model``, ``max_positions``, ``type_vocab_size``, ``norm_eps``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class BertEmbeddings(nn.Module):
    def __init__(self, config, *, norm=nn.LayerNorm):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.d_model)
        self.position = nn.Embedding(config.max_positions, config.d_model)
        self.token_type = nn.Embedding(config.type_vocab_size, config.d_model)
        self.norm = norm(config.d_model, eps=config.norm_eps)

    def forward(self, tokens: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        summed = self.word(tokens) + self.position.weight[: tokens.shape[-1]]
        if token_type_ids is not None:
            summed = summed + self.token_type(token_type_ids)
        else:
            summed = summed + self.token_type.weight[0]
        return self.norm(summed)


class MLMHead(nn.Module):
    def __init__(self, config, word_embeddings: nn.Embedding, *, norm=nn.LayerNorm):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.norm = norm(config.d_model, eps=config.norm_eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size)
        self.decoder.weight = word_embeddings.weight  # the same Parameter: one table, two uses

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(F.gelu(self.dense(hidden))))
