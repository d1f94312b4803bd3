"""Adapters for notebook 03: rotary position embeddings and ALiBi."""

from __future__ import annotations

import math

import torch

from autograder.adapters import given, need, outcome, shapes_made, summary


def rotation_matrix(ns, angle):
    return need(ns, "rotation_matrix")(angle)


def rope_frequencies(ns, d_k: int, base: float):
    return need(ns, "rope_frequencies")(d_k, base)


def rope_frequencies_outcome(ns, d_k: int):
    return outcome(need(ns, "rope_frequencies"), d_k)


def rope_matrix(ns, d_k: int, position: int, base: float):
    return need(ns, "rope_matrix")(d_k, position, base)


def rope_summary(ns, d_k: int, max_seq_len: int):
    module = need(ns, "RoPE")(d_k, max_seq_len)
    return summary(module)


def rope_forward(ns, d_k: int, max_seq_len: int, x, token_positions, base: float = 10000.0):
    return need(ns, "RoPE")(d_k, max_seq_len, base)(x, token_positions)


def rope_forward_input(ns, d_k: int, max_seq_len: int, x, token_positions):
    """The output, and whether forward changed ``x``: its values, or its version counter (an in-place write of
    the same values counts too)."""
    before, version = x.clone(), x._version
    output = need(ns, "RoPE")(d_k, max_seq_len)(x, token_positions)
    return {"output": output, "x_changed": x._version != version or not torch.equal(x, before)}


def rope_forward_shapes(ns, d_k: int, max_seq_len: int, x, token_positions) -> list:
    """The shape of every tensor that ``forward`` makes (the module is built outside the recording)."""
    module = need(ns, "RoPE")(d_k, max_seq_len)
    return shapes_made(module, x, token_positions)["shapes"]


def rope_construct_outcome(ns, d_k: int, max_seq_len: int):
    return outcome(need(ns, "RoPE"), d_k, max_seq_len)


def rope_forward_outcome(ns, d_k: int, max_seq_len: int, x, token_positions):
    return outcome(need(ns, "RoPE")(d_k, max_seq_len), x, token_positions)


def halves_permutation(ns, d_k: int):
    return need(ns, "halves_permutation")(d_k)


def alibi_slopes(ns, n_heads: int):
    return need(ns, "alibi_slopes")(n_heads)


def _course_alibi_slopes(n_heads: int):
    """Exercise 6 as the paper defines it (float32), so Exercise 7 is graded on its own."""
    m = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = [2.0 ** (-8.0 * h / m) for h in range(1, m + 1)]
    slopes += [2.0 ** (-4.0 * h / m) for h in range(1, 2 * (n_heads - m), 2)]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(ns, n_heads: int, q_len: int, k_len: int):
    """The student's ``alibi_bias``, with the course's ``alibi_slopes`` in their namespace while it runs."""
    with given(ns, alibi_slopes=_course_alibi_slopes):
        return need(ns, "alibi_bias")(n_heads, q_len, k_len)
