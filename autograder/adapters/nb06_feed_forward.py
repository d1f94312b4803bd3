"""Adapters for notebook 06: activations, the position-wise FeedForward and SwiGLU."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autograder.adapters import (
    MATRIX_PRODUCTS,
    dict_call_observed,
    first_product_perturbed,
    forward_backward,
    given,
    load,
    need,
    outcome,
    summary,
    tensors_made,
)


def activation(ns, name: str, x, grad_output=None):
    """``name(x)``, and with ``grad_output`` the input's gradient (the exercise's rule switches the library's off)."""
    function = need(ns, name)
    x = x.clone().requires_grad_(grad_output is not None)
    output = function(x)
    result = {"output": output, "grad": None}
    if (
        grad_output is not None
        and isinstance(output, torch.Tensor)
        and output.requires_grad
        and output.shape == grad_output.shape
    ):
        output.backward(grad_output)
        result["grad"] = x.grad
    return result


# Exercise 1's functions, as PyTorch computes them: the FeedForward and SwiGLU exercises are graded with these in
# the student's namespace, so a mistake in Exercise 1 costs Exercise 1 only.
_REFERENCE_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


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


# Exercise 6 is graded with the course's activations and width (Exercises 1 and 3), for the same reason.
_FUSED_GIVEN = {
    **_REFERENCE_ACTIVATIONS,
    "swiglu_hidden_dim": lambda d_model, multiple_of=64: -(-8 * d_model // (3 * multiple_of)) * multiple_of,
}


def _products_made(function, *args, **kwargs) -> dict:
    """``function(*args, **kwargs)`` and, for every matrix product a torch function ran, its name and output shape."""
    value, made = tensors_made(function, *args, **kwargs)
    return {
        "value": value,
        "products": [{"name": name, "shape": shape} for name, shape in made if name in MATRIX_PRODUCTS],
    }


def fused_summary(ns, args: list, kwargs: dict):
    with given(ns, **_FUSED_GIVEN):
        return summary(need(ns, "FusedSwiGLU")(*args, **kwargs))


def fused_forward(ns, args: list, kwargs: dict, state: dict, x, grad_output=None):
    """``FusedSwiGLU(*args, **kwargs)`` with ``state`` loaded by name: its output (and parameter gradients), and
    the matrix products one forward pass ran."""
    with given(ns, **_FUSED_GIVEN):
        module = load(need(ns, "FusedSwiGLU")(*args, **kwargs), state)
        with torch.no_grad():
            products = _products_made(module, x)["products"]
        result = forward_backward(module, grad_output, x)
    return result | {"products": products}


def fused_forward_perturbed(ns, args: list, kwargs: dict, state: dict, x, delta):
    """``FusedSwiGLU``'s output when ``delta`` is added to the result of the first matrix product with
    ``delta.shape[-1]`` (2 * d_ff) output features, however it is computed (``gate_up_proj(x)``, ``F.linear``, ``@``;
    flattened rows too: ``delta`` is laid out row by row like them)."""
    with given(ns, **_FUSED_GIVEN):
        module = load(need(ns, "FusedSwiGLU")(*args, **kwargs), state)
        with torch.no_grad(), first_product_perturbed(delta):
            output = module(x)
    return {"output": output}


def convert(ns, name: str, state: dict):
    """``name(state)`` for a state-dict conversion: its result, and whether the input dict came back unchanged."""
    value, caller = dict_call_observed(need(ns, name), state)
    unchanged = not (caller["removed"] or caller["added"] or caller["replaced"] or caller["edited"])
    if isinstance(value, dict):
        value = {key: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for key, v in value.items()}
    return {"value": value, "type": type(value).__name__, "input_unchanged": unchanged}
