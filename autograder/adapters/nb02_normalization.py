"""Adapters for notebook 02: LayerNorm and RMSNorm."""

from __future__ import annotations

import torch

from autograder.adapters import load, need, summary


def norm_init(ns, class_name: str, d_model: int):
    module = need(ns, class_name)(d_model)
    return {"summary": summary(module), "state": dict(module.state_dict())}


def norm_forward(ns, class_name: str, state: dict, x, eps: float, grad_output=None):
    """Output, and with ``grad_output`` the gradients of the input and of every parameter."""
    d_model = x.shape[-1]
    module = load(need(ns, class_name)(d_model, eps=eps), state)
    x = x.clone().requires_grad_(grad_output is not None)
    output = module(x)
    result = {"output": output}
    if grad_output is not None:
        if not isinstance(output, torch.Tensor) or output.shape != grad_output.shape:
            result["grads"] = f"the output has shape {list(getattr(output, 'shape', []))}, expected {list(x.shape)}"
        elif not output.requires_grad:
            result["grads"] = "the output does not require grad (was it computed under torch.no_grad() or detached?)"
        else:
            output.backward(grad_output)
            result["grads"] = {name: p.grad for name, p in module.named_parameters()}
            result["grads"]["input"] = x.grad
    return result
