"""BERT's input embeddings and masked-language-model head with the course's names (notebook 09).

``BertEmbeddings(config, *, norm=nn.LayerNorm)``: ``word``, ``position`` and ``token_type`` tables
(``nn.Embedding``) and ``norm = norm(d_model, eps=config.norm_eps)``; the output is the norm of the
sum of the three lookups (token types default to 0), without dropout.

``MLMHead(config, word_embeddings, *, norm=nn.LayerNorm)``: Hugging Face's BERT MLM head
(``BertLMPredictionHead``: ``dense`` (d_model -> d_model), exact GELU, the norm, then ``decoder``, a linear map
to the vocabulary whose weight is the word embedding table itself and whose bias is its own), its modules
under the course's names ``dense``, ``norm`` and ``decoder``.

``BertForMaskedLM(config)`` stacks them around post-norm ``EncoderBlock``s; ``mask_tokens`` and
``mlm_loss`` are BERT's masking and loss (notebook 09's interfaces), for notebook 10's demo; the loss is Hugging
Face's masked-LM loss.

``config`` is any object with the fields of the notebook's ``BertConfig`` (``vocab_size``,
``d_model``, ``max_positions``, ``type_vocab_size``, ``norm_eps``).
"""

from __future__ import annotations

import functools

import torch
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
    """Hugging Face's ``BertLMPredictionHead``, run as it is, with the course's names and arguments.

    Its modules are this module's children under the course's names (``transform.dense`` is ``dense``,
    ``transform.LayerNorm`` is ``norm``, ``decoder`` is ``decoder``), so the state dict, ``norm=`` and the word
    table the decoder is tied to are the course's. The HF head itself is kept outside ``_modules``: it holds the
    same three modules, and registering it too would list each parameter under a second name. So its separate
    ``bias`` (which HF's BertForMaskedLM ties to ``decoder.bias``; its forward does not read it) is not among this
    module's parameters: the decoder's bias is the head's.
    """

    def __init__(self, config, word_embeddings: nn.Embedding, *, norm=nn.LayerNorm):
        super().__init__()
        from transformers import BertConfig
        from transformers.models.bert.modeling_bert import BertLMPredictionHead

        head = BertLMPredictionHead(
            BertConfig(
                vocab_size=config.vocab_size,
                hidden_size=config.d_model,
                hidden_act="gelu",  # ACT2FN["gelu"]: the exact GELU
                layer_norm_eps=config.norm_eps,
            )
        )
        head.transform.LayerNorm = norm(config.d_model, eps=config.norm_eps)  # the norm asked for
        head.decoder.weight = word_embeddings.weight  # the same Parameter: one table, two uses
        self.dense, self.norm, self.decoder = head.transform.dense, head.transform.LayerNorm, head.decoder
        object.__setattr__(self, "_hf_head", head)  # not a child: see the class docstring

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._hf_head(hidden)


class BertForMaskedLM(nn.Module):
    """``embeddings``, ``blocks`` (post-norm encoder blocks, exact GELU, LayerNorms of ``norm_eps``), ``head``."""

    def __init__(self, config, *, norm=nn.LayerNorm):
        super().__init__()
        from autograder.reference.blocks import EncoderBlock

        self.config = config
        self.embeddings = BertEmbeddings(config, norm=norm)
        block_norm = functools.partial(norm, eps=config.norm_eps)
        self.blocks = nn.ModuleList(
            EncoderBlock(config.d_model, config.n_heads, config.d_ff, "gelu", False, norm=block_norm)
            for _ in range(config.n_layers)
        )
        self.head = MLMHead(config, self.embeddings.word, norm=norm)

    def forward(
        self, tokens: torch.Tensor, token_type_ids: torch.Tensor | None = None, padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.embeddings(tokens, token_type_ids)
        for block in self.blocks:
            x = block(x, padding_mask)
        return self.head(x)


def mask_tokens(
    tokens: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_ids,
    generator: torch.Generator,
    probability: float = 0.15,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: of the non-special tokens pick ``probability``; of those 80% [MASK], 10% random, 10% kept."""
    eligible = ~torch.isin(
        tokens,
        torch.as_tensor(list(special_ids) if not torch.is_tensor(special_ids) else special_ids, dtype=tokens.dtype),
    )
    draw = torch.rand(tokens.shape, generator=generator)
    chosen = eligible & (draw < probability)
    kind = torch.rand(tokens.shape, generator=generator)
    replacement = torch.randint(0, vocab_size, tokens.shape, generator=generator, dtype=tokens.dtype)
    inputs = tokens.clone()
    inputs[chosen & (kind < 0.8)] = mask_token_id
    randomized = chosen & (kind >= 0.8) & (kind < 0.9)
    inputs[randomized] = replacement[randomized]
    labels = torch.full_like(tokens, -100, dtype=torch.long)
    labels[chosen] = tokens[chosen].long()
    return inputs, labels


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the positions whose label is not -100: Hugging Face's masked-LM loss
    (``ForMaskedLMLoss``, its ``LOSS_MAPPING["ForMaskedLM"]``), which computes in float32 at least."""
    from transformers.loss.loss_utils import ForMaskedLMLoss

    # It flattens with ``view``, which needs contiguous tensors; these are copies only where they are not.
    return ForMaskedLMLoss(logits.contiguous(), labels.contiguous(), vocab_size=logits.shape[-1])
