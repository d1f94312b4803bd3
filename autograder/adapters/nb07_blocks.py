"""Adapters for notebook 07: the residual connection, pre-/post-norm blocks, encoder and decoder blocks.

The blocks take their components as constructor arguments; here they get the course's reference
components (``autograder.reference``), so grading never depends on the student's notebooks 02, 05
and 06.
"""

from __future__ import annotations

import torch
from torch import nn

from autograder.adapters import forward_backward, load, need, outcome, summary
from autograder.reference.attention import CrossAttention, MultiHeadAttention
from autograder.reference.feed_forward import FeedForward

COMPONENTS = {"attention": MultiHeadAttention, "feed_forward": FeedForward, "norm": nn.LayerNorm}


def _build(ns, class_name: str, args: list, kwargs: dict):
    components = dict(COMPONENTS, **({"cross_attention": CrossAttention} if class_name == "DecoderBlock" else {}))
    return need(ns, class_name)(*args, **kwargs, **components)


def block_parts(ns, class_name: str, args: list, kwargs: dict) -> dict:
    """Build the block with factories that record what they make: child name -> the argument that made it.

    The text requires the parts to be made by calling the arguments (``norm(d_model)``), not by naming a
    class: a block that ignores ``norm=partial(RMSNorm, eps=...)`` would otherwise pass here, with LayerNorms
    equal to the reference ones, and fail only in a later notebook.
    """
    components = dict(COMPONENTS, **({"cross_attention": CrossAttention} if class_name == "DecoderBlock" else {}))
    made = {}  # id(module) -> the argument whose call returned it

    def recording(argument, factory):
        def make(*args, **kwargs):
            module = factory(*args, **kwargs)
            made[id(module)] = argument
            return module

        return make

    block = need(ns, class_name)(*args, **kwargs, **{name: recording(name, f) for name, f in components.items()})
    if not isinstance(block, nn.Module):
        return {}
    return {name: made.get(id(child)) for name, child in block.named_children()}


def block_summary(ns, class_name: str, args: list, kwargs: dict):
    return summary(_build(ns, class_name, args, kwargs))


def block_forward(
    ns, class_name: str, args: list, kwargs: dict, state: dict, inputs: list, call_kwargs: dict, grad_output=None
):
    """Build the block with the reference components, load ``state`` by name, run it (and backward)."""
    module = load(_build(ns, class_name, args, kwargs), state)
    return forward_backward(module, grad_output, *inputs, **call_kwargs)


def decoder_on_meta(ns, args: list, x_shape: list, memory_len: int, padded: bool) -> dict:
    """``DecoderBlock(*args)`` moved to PyTorch's meta device and run on meta inputs (shapes only, no values):
    what it raised, or its output's device and shape. A tensor it makes on the CPU (a mask built without
    ``device=x.device``, or kept as a plain attribute) cannot be mixed with meta tensors, so it raises."""
    block = _build(ns, "DecoderBlock", args, {}).to("meta")
    batch, length, d_model = x_shape
    x, memory = (
        torch.empty(batch, length, d_model, device="meta"),
        torch.empty(batch, memory_len, d_model, device="meta"),
    )
    paddings = (
        [
            torch.ones(batch, length, dtype=torch.bool, device="meta"),
            torch.ones(batch, memory_len, dtype=torch.bool, device="meta"),
        ]
        if padded
        else []
    )
    made = []
    result = outcome(lambda: made.append(block(x, memory, *paddings)))
    output = made[0] if made else None
    return result | {"device": str(getattr(output, "device", "")), "shape": list(getattr(output, "shape", []))}


def _sublayer(kind: str, d_model: int) -> nn.Module:
    return nn.Linear(d_model, d_model) if kind == "linear" else MultiHeadAttention(d_model, 2)


def residual_summary(ns, kind: str, d_model: int):
    return summary(need(ns, "Residual")(_sublayer(kind, d_model)))


def residual_forward(ns, kind: str, d_model: int, state: dict, x, call_kwargs: dict, grad_output=None):
    """``Residual(sublayer)(x, **call_kwargs)``; whether ``x`` was changed; gradients of ``x`` and parameters."""
    module = load(need(ns, "Residual")(_sublayer(kind, d_model)), state)
    given = x.clone().requires_grad_(grad_output is not None)
    seen = given.detach().clone()
    result = forward_backward(module, grad_output, given, **call_kwargs)
    result["input_after"] = given.detach().clone()
    result["input_before"] = seen
    if grad_output is not None and isinstance(result.get("grads"), dict):
        result["input_grad"] = given.grad if given.grad is not None else torch.zeros_like(given)
    return result
