"""Adapters for notebook 06: activations, the position-wise FeedForward and SwiGLU."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autograder.adapters import forward_backward, given, load, need, outcome, summary


def activation(ns, name: str, x, grad_output=None):
    """``name(x)``, and with ``grad_output`` the input's gradient (the exercise's rule switches the library's off)."""
    function = need(ns, name)
    x = x.clone().requires_grad_(grad_output is not None)
    output = function(x)
    result = {"output": output, "grad": None}
    if grad_output is not None and isinstance(output, torch.Tensor) and output.requires_grad \
            and output.shape == grad_output.shape:
        output.backward(grad_output)
        result["grad"] = x.grad
    return result


# Exercise 1's functions, as PyTorch computes them: the FeedForward and SwiGLU exercises are graded with these in
# the student's namespace, so a mistake in Exercise 1 costs Exercise 1 only.
_REFERENCE_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
                          "silu": F.silu}


def ffn_summary(ns, class_name: str, args: list, kwargs: dict):
    with given(ns, **_REFERENCE_ACTIVATIONS):
        return summary(need(ns, class_name)(*args, **kwargs))


def ffn_forward(ns, class_name: str, args: list, kwargs: dict, state: dict, x, grad_output=None):
    """Build ``class_name(*args, **kwargs)``, load ``state`` by name, return its output (and parameter gradients)."""
    with given(ns, **_REFERENCE_ACTIVATIONS):
        module = load(need(ns, class_name)(*args, **kwargs), state)
        return forward_backward(module, grad_output, x)


def ffn_outcome(ns, args: list, kwargs: dict, x):
    """What building ``FeedForward(*args, **kwargs)`` and calling it on ``x`` raised, if anything."""
    with given(ns, **_REFERENCE_ACTIVATIONS):
        return outcome(lambda: need(ns, "FeedForward")(*args, **kwargs)(x))


def ffn_dropout(ns, args: list, kwargs: dict, state: dict, x):
    """Two calls in train mode (different random numbers) and two in eval mode."""
    with given(ns, **_REFERENCE_ACTIVATIONS):
        module = load(need(ns, "FeedForward")(*args, **kwargs), state)
    if not isinstance(module, nn.Module):
        return {}
    results = {}
    with torch.no_grad():
        module.train()
        torch.manual_seed(0)
        results["train_a"] = module(x)
        torch.manual_seed(1)
        results["train_b"] = module(x)
        module.eval()
        results["eval_a"] = module(x)
        results["eval_b"] = module(x)
    return results


def call(ns, name: str, args: list, kwargs: dict):
    """The value a plain function returns, and the name of its type (a check may insist on int)."""
    value = need(ns, name)(*args, **kwargs)
    return {"value": value, "type": type(value).__name__}
