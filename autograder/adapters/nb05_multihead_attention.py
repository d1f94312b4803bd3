"""Adapters for notebook 05: multi-head, fused-QKV, grouped-query and cross attention."""

from __future__ import annotations

from autograder.adapters import lines_run, load, need, outcome, summary
from autograder.reference.rope import RoPE


def attention_summary(ns, class_name: str, args: list):
    return summary(need(ns, class_name)(*args))


def attention_forward(ns, class_name: str, args: list, state: dict, inputs: list, mask=None):
    """Build ``class_name(*args)``, load ``state`` by name, return ``module(*inputs, mask=mask)``."""
    module = load(need(ns, class_name)(*args), state)
    return module(*inputs, mask=mask)


def forward_lines(ns, class_name: str, args: list, inputs: list) -> dict:
    """The work one forward pass of ``class_name(*args)`` does: lines of the student's code, torch calls
    (``lines_run``)."""
    module = need(ns, class_name)(*args)
    return lines_run(module, *inputs)["work"]


def construct_outcome(ns, class_name: str, args: list):
    return outcome(need(ns, class_name), *args)


def kv_cache_bytes(ns, *args, **kwargs):
    value = need(ns, "kv_cache_bytes")(*args, **kwargs)
    return {"value": value if isinstance(value, (int, float)) else str(value), "type": type(value).__name__}


def rotary_forward(ns, args: list, state: dict, x, mask=None, token_positions=None):
    """The student's attention around the checker's own RoPE, so exercise 6 does not rest on notebook 03."""
    module = load(need(ns, "RotaryMultiHeadAttention")(*args, RoPE()), state)
    kwargs = {} if token_positions is None else {"token_positions": token_positions}
    return module(x, mask, **kwargs)
