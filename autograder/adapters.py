"""The adapters' toolkit: what every notebook's adapters share.

A notebook's adapters live in its module (``autograder/notebooks/nb<notebook stem>.py``), beside its exercises
and checks, marked ``@adapter``. They are the only code that touches a student's objects: each takes the
student's namespace first, then plain inputs (tensors, numbers), builds and calls the student's classes, and
returns plain results. They run beside student code (in the worker, or in the notebook's kernel), so they
compute and report; they never judge.
"""

from __future__ import annotations

import contextlib
import sys

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from autograder.rules import is_student_code
from coursetools.grading_run import being_graded


def adapter(function):
    """Mark ``function`` as an adapter of its notebook's module: a check can call it (``impl.call(function, ...)``),
    in the student's process; nothing else in the module can be called there (``resolve``)."""
    function.__adapter__ = True
    return function


def resolve(module, reference: str):
    """The adapter ``reference`` (``module:name``, ``impl.reference``) names, if it is one of ``module``'s: a
    function defined there and marked ``@adapter``. So a check of one notebook cannot call another notebook's
    adapters, nor a check, a helper or anything the module merely imported (tests/test_adapters_wired.py)."""
    named, _, name = reference.partition(":")
    function = getattr(module, name, None) if named == module.__name__ else None
    if not getattr(function, "__adapter__", False) or getattr(function, "__module__", None) != module.__name__:
        raise LookupError(f"{reference} is not one of {module.__name__}'s adapters")
    return function


def need(namespace: dict, name: str):
    """The student's definition of ``name``, or a NameError that says what to do: in the notebook, run the cell
    that defines it; in grading, which ran every cell from the top, that no cell defined it."""
    if name not in namespace:
        if being_graded():
            raise NameError(
                f"{name} is not defined: the grader ran every cell of your notebook from the top, and "
                "none defined it (did its answer cell fail, or define it under another name?)"
            )
        raise NameError(f"{name} is not defined: run its answer cell (and the cells above it) first")
    value = namespace[name]
    if _is_the_courses(value):
        raise TypeError(f"`{name}` is the course's reference implementation; the exercise asks for your own")
    return value


@contextlib.contextmanager
def given(ns, **functions):
    """The course's versions of earlier exercises' functions, under the notebook's names, for one call.

    So an exercise is graded on its own: a mistake in an earlier exercise of the notebook costs only that one.
    """
    saved = {name: ns[name] for name in functions if name in ns}
    ns.update(functions)
    try:
        yield
    finally:
        for name in functions:
            if name in saved:
                ns[name] = saved[name]
            else:
                ns.pop(name, None)


_COURSE_MODULES = ("autograder.reference", "autograder.notebooks")


def _is_the_courses(value) -> bool:
    """Whether ``value`` (or its class, or a base class) is defined in the course's reference or notebook modules."""
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
            name: {"shape": list(b.shape), "persistent": name in persistent_names} for name, b in module.named_buffers()
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
        result["grads"] = (
            f"the output has shape {list(getattr(output, 'shape', []))}, expected {list(grad_output.shape)}"
        )
    elif not output.requires_grad:
        result["grads"] = (
            "the output does not require grad, so no gradient can reach the parameters "
            "(was it computed from .data, under torch.no_grad(), or detached?)"
        )
    else:
        output.backward(grad_output)
        result["grads"] = {
            name: (p.grad if p.grad is not None else torch.zeros_like(p)) for name, p in module.named_parameters()
        }
    return result


def forward_backward_inputs(module: nn.Module, grad_output: torch.Tensor | None, inputs: dict, *args, **kwargs) -> dict:
    """``forward_backward`` of ``module(*inputs.values(), *args, **kwargs)``, the ``inputs`` (name -> tensor) copied
    to require grad when there is a ``grad_output``: their gradients join the parameters' in ``grads``, under their
    names (zeros when none reached them)."""
    leaves = {name: t.clone().requires_grad_(grad_output is not None) for name, t in inputs.items()}
    result = forward_backward(module, grad_output, *leaves.values(), *args, **kwargs)
    if isinstance(result.get("grads"), dict):  # a backward pass ran
        result["grads"] |= {name: t.grad if t.grad is not None else torch.zeros_like(t) for name, t in leaves.items()}
    return result


def lines_run(function, *args, **kwargs) -> dict:
    """``function(*args, **kwargs)`` and how much work it did, for the "no loops" rules: ``work`` holds the lines of
    the student's code it ran, the torch functions it called and the Python values it handed them in lists.

    The student's code is any code but Python's, the libraries' and the course's (``rules.is_student_code``): a
    cell, a module of theirs, code run from a string. Vectorised code does the same work whatever the sizes; a
    loop over the data does more for larger ones, whatever its form: a for or a comprehension runs more lines,
    ``map(F.scaled_dot_product_attention, q, k, v)`` more torch calls, ``torch.tensor(list(map(...)))`` hands
    torch more values. (``lines`` alone is kept for callers that read it.)
    """
    from torch.overrides import TorchFunctionMode

    work = {"lines of Python": 0, "torch calls": 0, "Python values given to torch": 0}

    def per_line(frame, event, arg):
        if event == "line":
            work["lines of Python"] += 1
        return per_line

    def per_call(frame, event, arg):
        return per_line if is_student_code(frame.f_code.co_filename) else None

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            work["torch calls"] += 1
            work["Python values given to torch"] += _python_values([*args, *(kwargs or {}).values()])
            return func(*args, **(kwargs or {}))

    before = sys.gettrace()
    sys.settrace(per_call)
    try:
        with Count():
            value = function(*args, **kwargs)
    finally:
        sys.settrace(before)
    return {"value": value, "lines": work["lines of Python"], "work": work}


def _python_values(arguments: list) -> int:
    """How many plain values (numbers, ...) the ``arguments`` hold inside lists, tuples and ranges: the data the
    student's Python made, not the arguments themselves (``x.reshape(b, s, h, d)``: none; ``torch.tensor([...])``:
    its length)."""
    return sum(_held(argument) for argument in arguments if isinstance(argument, list | tuple | range))


def _held(value) -> int:
    if isinstance(value, range):
        return len(value)
    if isinstance(value, list | tuple):
        return sum(_held(item) for item in value)
    return 0 if isinstance(value, torch.Tensor) else 1


def calls_of(target, function, *args, **kwargs) -> dict:
    """``function(*args, **kwargs)`` and how many times ``target`` (a Python function) ran meanwhile, however it
    was reached: by its name, a reference kept elsewhere, a helper. What runs is its code, so that is what is
    counted (for a decorated function, the code it wraps)."""
    while hasattr(target, "__wrapped__") or hasattr(target, "func"):  # functools.wraps, functools.partial
        target = getattr(target, "__wrapped__", None) or target.func
    call = getattr(type(target), "__call__", None)  # noqa: B004 - a callable object: the code of its class's __call__
    code = getattr(target, "__code__", None) or getattr(call, "__code__", None)
    count = 0

    def per_call(frame, event, arg):
        nonlocal count
        if event == "call" and frame.f_code is code:
            count += 1

    before = sys.getprofile()
    sys.setprofile(per_call)
    try:
        value = function(*args, **kwargs)
    finally:
        sys.setprofile(before)
    return {"value": value, "calls": count if code is not None else None}


def tensors_made(function, *args, **kwargs) -> tuple[object, list[tuple[str, list[int]]]]:
    """``function(*args, **kwargs)`` and, for every tensor a torch function made while it ran, the function's
    name and the tensor's shape.

    Factories (``torch.zeros``), operations and methods all count, however the student reached them
    (``nn.Linear`` calls ``F.linear``, ``@`` is ``Tensor.matmul``); a torch-function mode sees the outermost
    call only, so an ``einsum`` counts once.
    """
    from torch.overrides import TorchFunctionMode

    made = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            for value in result if isinstance(result, tuple | list) else (result,):
                if isinstance(value, torch.Tensor):
                    made.append((getattr(func, "__name__", ""), list(value.shape)))
            return result

    with Record():
        value = function(*args, **kwargs)
    return value, made


def shapes_made(function, *args, **kwargs) -> dict:
    """``function(*args, **kwargs)`` and the shape of every tensor a torch function made while it ran
    (``tensors_made``); for rules on what code may build (notebook 03: no ``[d_k, d_k]`` matrices in ``forward``)."""
    value, made = tensors_made(function, *args, **kwargs)
    return {"value": value, "shapes": [shape for _, shape in made]}


# Torch functions that multiply matrices, by the name a TorchFunctionMode sees, however they are reached.
MATRIX_PRODUCTS = frozenset(
    {
        "linear",
        "matmul",
        "__matmul__",
        "__rmatmul__",
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "addbmm",
        "einsum",
        "tensordot",
        "mv",
        "addmv",
        "inner",
        "bilinear",
        "chain_matmul",
        "multi_dot",
    }
)


@contextlib.contextmanager
def first_product_perturbed(delta: torch.Tensor):
    """Adds ``delta`` to the result of the first matrix product run inside the block whose result has
    ``delta.shape[-1]`` output features and ``delta.numel()`` numbers (rows flattened or not: ``delta`` is laid
    out row by row like them), however it is computed (a module, ``F.linear``, ``@``). Yields a list that holds
    ``True`` once it has: whether that product's result is what the code went on with shows in its output."""
    from torch.overrides import TorchFunctionMode

    width, numel, done = delta.shape[-1], delta.numel(), []

    class Perturb(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            if (
                not done
                and getattr(func, "__name__", "") in MATRIX_PRODUCTS
                and isinstance(result, torch.Tensor)
                and result.dim()
                and result.shape[-1] == width
                and result.numel() == numel
            ):
                done.append(True)
                return result + delta.reshape(result.shape).to(result.dtype)
            return result

    with Perturb():
        yield done


def dict_call_observed(function, state: dict) -> tuple[object, dict]:
    """``function(given)`` on a copy ``given`` of the caller's dict ``state``, and what the call did to it ("leave
    the input as it is"): the dict returned as the result, keys removed or added, tensor objects replaced, and
    tensors edited (version counters, raised by any in-place edit, and values)."""
    given = dict(state)
    versions = {key: value._version for key, value in state.items() if isinstance(value, torch.Tensor)}
    originals = {key: value.detach().clone() for key, value in state.items() if isinstance(value, torch.Tensor)}
    result = function(given)
    caller = {
        "same_dict": result is given,
        "removed": sorted(set(state) - set(given)),
        "added": sorted(str(k) for k in set(given) - set(state)),
        "replaced": sorted(k for k in state if k in given and given[k] is not state[k]),
        "edited": sorted(
            k
            for k, value in originals.items()
            if state[k]._version != versions[k] or state[k].shape != value.shape or not torch.equal(state[k], value)
        ),
    }
    return result, caller


class Recording:
    """A constructor argument standing in for ``make`` (a class or a function): it makes what ``make`` makes and keeps
    every module it made, so that a check sees which parts of a model were built by calling the argument."""

    def __init__(self, make):
        self.make, self.made = make, []

    def __call__(self, *args, **kwargs):
        module = self.make(*args, **kwargs)
        self.made.append(module)
        return module

    def built(self, module) -> bool:
        return module is not None and any(module is made for made in self.made)


def tensors_in(value):
    """The tensors in ``value``, looking inside lists, tuples and dicts."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


class CPUBesideMeta(TorchFunctionMode):
    """Notes each torch function (by any name it is reached) given a CPU tensor of one or more dimensions beside a
    tensor on the meta device, with the names of ``module``'s parameters and buffers among its meta tensors.

    On the meta device ``F.embedding`` and indexing accept CPU indices silently, so positions (or segment ids) made on
    the CPU and only used to look up a table do not raise there; on a GPU they do (or are copied at every call). A 0-d
    CPU tensor is a scalar that any device accepts: not noted."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.names = {id(t): n for n, t in (*module.named_parameters(), *module.named_buffers())}
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = list(tensors_in((args, kwargs)))
        meta = [t for t in tensors if t.device.type == "meta"]
        cpu = [list(t.shape) for t in tensors if t.device.type == "cpu" and t.dim() > 0]
        if meta and cpu:
            tables = [self.names[id(t)] for t in meta if id(t) in self.names]
            self.seen.append({"function": getattr(func, "__name__", repr(func)), "cpu": cpu, "tables": tables})
        return func(*args, **kwargs)


@torch.no_grad()
def run_on_meta(module: nn.Module, *arguments) -> dict:
    """``module`` moved to PyTorch's meta device and called on ``arguments`` (meta tensors, or None): what it raised,
    its output's device and shape, and the CPU tensors its torch functions were given beside meta ones
    (``CPUBesideMeta``). No values are computed, so any size costs nothing."""
    module = module.to("meta").eval()
    made = []
    with CPUBesideMeta(module) as observed:
        result = outcome(lambda: made.append(module(*arguments)))
    output = made[0] if made else None
    return result | {
        "device": str(getattr(output, "device", "")),
        "shape": list(getattr(output, "shape", [])),
        "cpu_beside_meta": observed.seen[:3],
    }
