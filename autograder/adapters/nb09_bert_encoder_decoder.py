"""Adapters for notebook 09: BERT's embeddings, MLM head, BertForMaskedLM, masking, the MLM loss, the
encoder-decoder Transformer and its parameter count.

Configurations are built with the student's own dataclasses (``BertConfig``, ``TransformerConfig``)
from plain dicts. The models take their parts as constructor arguments; here they get the course's
reference parts (``autograder.reference``: embeddings, MLM head, encoder and decoder blocks, the
sinusoidal table) and ``nn.LayerNorm``, so grading never depends on the student's other exercises or
earlier notebooks.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from autograder.adapters import forward_backward, load, need, summary
from autograder.reference.bert import BertEmbeddings as ReferenceEmbeddings
from autograder.reference.bert import MLMHead as ReferenceHead
from autograder.reference.blocks import DecoderBlock, EncoderBlock
from autograder.reference.positions import SinusoidalPositionalEncoding


def _bert_config(ns, fields: dict):
    return need(ns, "BertConfig")(**fields)


def _counted(module) -> dict:
    result = summary(module)
    if isinstance(module, nn.Module):
        result["count"] = sum(p.numel() for p in module.parameters())
    return result


# --- Exercise 1 ----------------------------------------------------------------------------


def _embeddings(ns, fields):
    return need(ns, "BertEmbeddings")(_bert_config(ns, fields), norm=nn.LayerNorm)


def embeddings_summary(ns, fields: dict):
    return summary(_embeddings(ns, fields))


def embeddings_forward(ns, fields: dict, state: dict, tokens, token_type_ids=None):
    module = load(_embeddings(ns, fields), state).eval()
    args = [tokens] if token_type_ids is None else [tokens, token_type_ids]
    return {"output": module(*args)}


# --- Exercise 2 ----------------------------------------------------------------------------


def _head(ns, fields):
    config = _bert_config(ns, fields)
    word = nn.Embedding(config.vocab_size, config.d_model)
    return need(ns, "MLMHead")(config, word, norm=nn.LayerNorm), word


def head_summary(ns, fields: dict):
    head, word = _head(ns, fields)
    result = summary(head)
    if isinstance(head, nn.Module):
        result["shares_word_weight"] = any(p is word.weight for p in head.parameters())
    return result


def head_forward(ns, fields: dict, state: dict, word_weight, hidden, grad_output=None):
    """Load ``state`` (without the decoder's weight) and the word table, run, and backpropagate."""
    head, word = _head(ns, fields)
    with torch.no_grad():
        word.weight.copy_(word_weight)
    head.load_state_dict(state, strict=False)  # decoder.weight comes from the word table (or must equal it)
    missing = [k for k in head.state_dict() if k not in state and k != "decoder.weight"]
    unexpected = [k for k in state if k not in head.state_dict()]
    if missing or unexpected:
        raise KeyError(f"MLMHead's state dict does not fit: missing {missing}, unexpected {unexpected}")
    result = forward_backward(head.eval(), grad_output, hidden)
    if grad_output is not None and isinstance(result.get("grads"), dict):
        result["word_grad"] = word.weight.grad if word.weight.grad is not None else torch.zeros_like(word.weight)
    return result


# --- Exercise 3 ----------------------------------------------------------------------------

BERT_PARTS = {"embeddings": ReferenceEmbeddings, "block": EncoderBlock, "head": ReferenceHead, "norm": nn.LayerNorm}


def _bert(ns, fields):
    return need(ns, "BertForMaskedLM")(_bert_config(ns, fields), **BERT_PARTS)


def bert_summary(ns, fields: dict):
    return _counted(_bert(ns, fields))


def bert_forward(ns, fields: dict, state: dict, tokens, token_type_ids=None, padding_mask=None):
    module = load(_bert(ns, fields), state).eval()
    with torch.no_grad():
        return {"output": module(tokens, token_type_ids, padding_mask)}


# --- Exercise 4 ----------------------------------------------------------------------------


def mask_tokens_run(ns, tokens, options: dict, seed: int, global_seed: int = 0, draws: int = 1):
    """``draws`` calls of ``mask_tokens`` with one generator seeded ``seed`` (global RNG seeded ``global_seed``)."""
    mask_tokens = need(ns, "mask_tokens")
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(global_seed)
    given = tokens.clone()
    inputs, labels = [], []
    for _ in range(draws):
        result = mask_tokens(given, generator=generator, **options)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return {"result": result}
        inputs.append(result[0])
        labels.append(result[1])
        if not torch.equal(given, tokens):
            break
    return {"inputs": inputs, "labels": labels, "tokens_after": given}


# --- Exercise 5 ----------------------------------------------------------------------------


def mlm_loss_run(ns, logits, labels, backward: bool = False):
    logits = logits.clone().requires_grad_(backward)
    loss = need(ns, "mlm_loss")(logits, labels)
    result = {"loss": loss}
    if backward and isinstance(loss, torch.Tensor) and loss.requires_grad and loss.dim() == 0:
        loss.backward()
        result["logits_grad"] = logits.grad
    return result


# --- Exercise 6 ----------------------------------------------------------------------------

ENCDEC_PARTS = {
    "encoder_block": EncoderBlock,
    "decoder_block": DecoderBlock,
    "norm": nn.LayerNorm,
    "positions": SinusoidalPositionalEncoding,
}


def _encdec(ns, fields):
    return need(ns, "EncoderDecoder")(need(ns, "TransformerConfig")(**fields), **ENCDEC_PARTS)


def encdec_summary(ns, fields: dict):
    return _counted(_encdec(ns, fields))


def encdec_build_error(ns, fields: dict):
    """What constructing the model raised (or None)."""
    try:
        _encdec(ns, fields)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001
        return type(error).__name__
    return None


def encdec_forward(ns, fields: dict, state: dict, src, tgt, src_padding=None, tgt_padding=None):
    """``forward`` and ``encode`` of the model with ``state`` loaded by name."""
    module = load(_encdec(ns, fields), state).train()  # no dropout in the course's parts: train == eval
    with torch.no_grad():
        return {"output": module(src, tgt, src_padding, tgt_padding), "memory": module.encode(src, src_padding)}


# --- Exercise 7 ----------------------------------------------------------------------------


def count_parameters(ns, fields: dict):
    """What ``transformer_num_parameters(TransformerConfig(**fields))`` returns (an int as a plain int)."""
    value = need(ns, "transformer_num_parameters")(need(ns, "TransformerConfig")(**fields))
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value
