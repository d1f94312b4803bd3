"""Adapters for notebook 04: softmax, attention and masks."""

from __future__ import annotations

from autograder.adapters import calls_of, need


def softmax(ns, x, dim=-1):
    return need(ns, "softmax")(x, dim=dim)


def attention_weights(ns, q, k, mask=None):
    return need(ns, "attention_weights")(q, k, mask)


def scaled_dot_product_attention(ns, q, k, v, mask=None):
    return need(ns, "scaled_dot_product_attention")(q, k, v, mask)


def attention_weights_used(ns, q, k, v, mask=None) -> dict:
    """``scaled_dot_product_attention(q, k, v, mask)`` and how many times the student's ``attention_weights`` ran
    meanwhile (``calls_of``: reached by any name or reference; None when it is not a Python function)."""
    return calls_of(need(ns, "attention_weights"), need(ns, "scaled_dot_product_attention"), q, k, v, mask)


def causal_mask(ns, seq_len: int):
    return need(ns, "causal_mask")(seq_len)


def padding_mask(ns, token_ids, pad_id: int):
    return need(ns, "padding_mask")(token_ids, pad_id)


def decoder_mask(ns, token_ids, pad_id: int):
    return need(ns, "decoder_mask")(token_ids, pad_id)


def cross_attention_mask(ns, target_ids, source_ids, pad_id: int):
    return need(ns, "cross_attention_mask")(target_ids, source_ids, pad_id)
