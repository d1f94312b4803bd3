"""Adapters for notebook 01: tokens, embeddings and positions."""

from __future__ import annotations

import torch
from torch import nn

from autograder.adapters import forward_backward, load, need, outcome, summary


def embedding_summary(ns, num_embeddings: int, embedding_dim: int, seed: int = 0):
    torch.manual_seed(seed)
    module = need(ns, "Embedding")(num_embeddings, embedding_dim)
    return {"summary": summary(module), "weight": getattr(module, "weight", None)}


def embedding_forward(ns, weight, token_ids, scale=False, grad_output=None):
    num_embeddings, embedding_dim = weight.shape
    module = load(need(ns, "Embedding")(num_embeddings, embedding_dim, scale=scale), {"weight": weight})
    return forward_backward(module, grad_output, token_ids)


def sinusoidal_summary(ns, max_len: int, d_model: int):
    module = need(ns, "SinusoidalPositionalEncoding")(max_len, d_model)
    output = module(torch.arange(max_len))
    return {"summary": summary(module), "requires_grad": bool(getattr(output, "requires_grad", False))}


def sinusoidal_forward(ns, max_len: int, d_model: int, positions):
    return need(ns, "SinusoidalPositionalEncoding")(max_len, d_model)(positions)


def sinusoidal_out_of_range(ns, max_len: int, d_model: int, positions):
    return outcome(need(ns, "SinusoidalPositionalEncoding")(max_len, d_model), positions)


def learned_summary(ns, max_len: int, d_model: int, seed: int = 0):
    torch.manual_seed(seed)
    module = need(ns, "LearnedPositionalEmbedding")(max_len, d_model)
    return {"summary": summary(module), "weight": getattr(module, "weight", None)}


def learned_forward(ns, weight, positions, grad_output=None):
    max_len, d_model = weight.shape
    module = load(need(ns, "LearnedPositionalEmbedding")(max_len, d_model), {"weight": weight})
    return forward_backward(module, grad_output, positions)


def learned_out_of_range(ns, max_len: int, d_model: int, positions):
    return outcome(need(ns, "LearnedPositionalEmbedding")(max_len, d_model), positions)


def input_embedding(ns, token_weight, position_weight, token_ids, start_pos=None, grad_output=None):
    """InputEmbedding around torch's own nn.Embedding tables, so only this exercise is tested."""
    module = need(ns, "InputEmbedding")(
        nn.Embedding.from_pretrained(token_weight.clone(), freeze=False),
        nn.Embedding.from_pretrained(position_weight.clone(), freeze=False),
    )
    kwargs = {} if start_pos is None else {"start_pos": start_pos}
    result = forward_backward(module, grad_output, token_ids, **kwargs)
    result["summary"] = summary(module)
    return result
