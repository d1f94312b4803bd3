"""Adapters: the only code that touches a student's objects.

One module per notebook, ``nb<notebook stem>.py``. Each function takes the student's
namespace first, then plain inputs (tensors, numbers), builds and calls the student's
classes, and returns plain results. They run beside student code (in the worker, or in
the notebook's kernel), so they compute and report; they never judge.
"""

from __future__ import annotations

import torch
from torch import nn


def need(namespace: dict, name: str):
    """The student's definition of ``name``, or a NameError that says what to do."""
    if name not in namespace:
        raise NameError(f"{name} is not defined: run its answer cell (and the cells above it) first")
    value = namespace[name]
    if _is_the_courses(value):
        raise TypeError(f"`{name}` is the course's reference implementation; the exercise asks for your own")
    return value


_COURSE_MODULES = ("autograder.reference", "autograder.checks")


def _is_the_courses(value) -> bool:
    """Whether ``value`` (or its class, or a base class) is defined in the course's reference or checks."""
    owners = [value, type(value)]
    for owner in list(owners):
        owners += list(getattr(owner, "__mro__", ()))
    return any(str(getattr(owner, "__module__", "") or "").startswith(_COURSE_MODULES) for owner in owners)


def summary(module) -> dict:
    """What a module holds: parameters, buffers (with persistence) and submodule types."""
    if not isinstance(module, nn.Module):
        return {"__unsupported__": type(module).__qualname__}
    persistent_names = set(module.state_dict().keys())
    return {
        "parameters": {name: list(p.shape) for name, p in module.named_parameters()},
        "trainable": {name: p.requires_grad for name, p in module.named_parameters()},
        "buffers": {
            name: {"shape": list(b.shape), "persistent": name in persistent_names}
            for name, b in module.named_buffers()
        },
        "submodules": {name: type(m).__name__ for name, m in module.named_modules() if name},
    }


def load(module: nn.Module, state: dict) -> nn.Module:
    """Load ``state`` by name, so the course's parameter names are part of the interface."""
    module.load_state_dict(state, strict=True)
    return module


def outcome(function, *args, **kwargs) -> dict:
    """Run ``function``; report what it raised (for checks that expect an error)."""
    try:
        function(*args, **kwargs)
    except NotImplementedError:  # a stub is not an answer
        raise
    except Exception as error:  # noqa: BLE001
        return {"raised": type(error).__name__, "message": str(error)}
    return {"raised": None, "message": ""}


def forward_backward(module: nn.Module, grad_output: torch.Tensor | None, *args, **kwargs) -> dict:
    """Output of ``module(*args)`` and, given ``grad_output``, the gradient of every parameter.

    When no backward pass is possible, ``grads`` is a sentence saying why.
    """
    output = module(*args, **kwargs)
    result = {"output": output}
    if grad_output is None:
        return result
    if not isinstance(output, torch.Tensor) or output.shape != grad_output.shape:
        result["grads"] = f"the output has shape {list(getattr(output, 'shape', []))}, expected {list(grad_output.shape)}"
    elif not output.requires_grad:
        result["grads"] = (
            "the output does not require grad, so no gradient can reach the parameters "
            "(was it computed from .data, under torch.no_grad(), or detached?)"
        )
    else:
        output.backward(grad_output)
        result["grads"] = {
            name: (p.grad if p.grad is not None else torch.zeros_like(p))
            for name, p in module.named_parameters()
        }
    return result
