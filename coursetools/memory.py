"""What a piece of PyTorch code allocates on the CPU, watched from below autograd: notebook 14's measurements and
the checks of its memory rules use the same watcher.

``torch.cuda.max_memory_allocated`` has no CPU twin, so ``watch_memory`` keeps its own count. A dispatch mode
sees every aten operator that runs inside the block, the backward pass that autograd runs for it included (a
torch-function mode does not see the backward of an ``autograd.Function``). Each operator's outputs that own
new storage (not views) are counted until their storage is freed; the peak is the largest sum of bytes alive at
once, and ``largest`` the largest single tensor by number of elements. Memory allocated before the block (its
inputs) is not counted.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from dataclasses import dataclass, field

import torch
import torch._dynamo  # noqa: F401 - a dispatch mode imports it on first use, and an exercise's rules may be in force then
from torch.utils._python_dispatch import TorchDispatchMode


@dataclass
class MemoryWatch:
    """What ``watch_memory`` saw: ``peak_bytes`` (the most bytes of new storage alive at once), ``largest`` (the
    shape of the tensor with the most elements that was made, not a view), ``made`` (how many were made) and
    ``products`` (the last two sizes of each matrix product's result: the tiles a tiled computation multiplies) and
    ``scalars`` (how many numbers were taken out of tensors into Python: ``.item()``, ``float(t)``, ``int(t)``) and
    ``shapes`` (the shapes of the tensors made)."""

    peak_bytes: int = 0
    largest: tuple[int, ...] = ()
    made: int = 0
    products: list = field(default_factory=list)
    scalars: int = 0
    shapes: set = field(default_factory=set)  # the shapes of the tensors made
    # storage id -> (weak reference to the storage, its bytes). Keyed by storage because some operators return a
    # view of a storage they just made without saying so in their schema (aten::_unsafe_view, behind matmul's
    # reshapes): counted per tensor, that storage would count twice. A storage's Python object lives exactly as
    # long as the storage (PyTorch preserves it), so the reference's callback takes it out of the count when it
    # is freed: each operator costs the watch the same whatever is alive, rather than a pass over all of it.
    _alive: dict = field(default_factory=dict, repr=False)
    _alive_bytes: int = field(default=0, repr=False)

    @property
    def largest_numel(self) -> int:
        numel = 1
        for size in self.largest:
            numel *= size
        return numel if self.largest or self.made else 0

    def _note(self, outputs) -> None:
        for tensor in outputs:
            if tensor.is_meta or tensor.device.type != "cpu":
                continue
            self.made += 1
            self.shapes.add(tuple(tensor.shape))
            if not self.largest or tensor.numel() > self.largest_numel:
                self.largest = tuple(tensor.shape)
            storage = tensor.untyped_storage()
            key = storage._cdata
            if key not in self._alive:
                size = storage.nbytes()
                self._alive[key] = (weakref.ref(storage, functools.partial(self._freed, key)), size)
                self._alive_bytes += size
        self.peak_bytes = max(self.peak_bytes, self._alive_bytes)

    def _freed(self, key, reference) -> None:
        if key in self._alive and self._alive[key][0] is reference:
            _, size = self._alive.pop(key)
            self._alive_bytes -= size

    @property
    def alive_bytes(self) -> int:
        """The bytes of the storages made in the block that are still alive (what it left allocated)."""
        return self._alive_bytes


_PRODUCTS = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "dot", "mv", "addmv"}


@functools.cache  # one answer per operator: the schema does not change
def _owns_new_storage(func) -> bool:
    """Whether an operator's results are new tensors, not views or in-place edits of its arguments."""
    return not any(ret.alias_info is not None for ret in func._schema.returns)


class _Watch(TorchDispatchMode):
    def __init__(self, watch: MemoryWatch):
        super().__init__()
        self.watch = watch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func._schema.name == "aten::_local_scalar_dense":
            self.watch.scalars += 1
        if func._schema.name.removeprefix("aten::") in _PRODUCTS and isinstance(result, torch.Tensor):
            self.watch.products.append(tuple(result.shape[-2:]))
        if _owns_new_storage(func):
            outputs = result if isinstance(result, tuple | list) else (result,)
            self.watch._note([t for t in outputs if isinstance(t, torch.Tensor)])
        return result


@contextlib.contextmanager
def watch_memory():
    """``with watch_memory() as seen: ...``: afterwards ``seen.peak_bytes``, ``seen.largest`` (``MemoryWatch``)."""
    watch = MemoryWatch()
    with _Watch(watch):
        yield watch


@contextlib.contextmanager
def saved_for_backward():
    """``with saved_for_backward() as saved: y = f(x)``: ``saved`` lists each tensor autograd keeps for the
    backward pass of what runs in the block (``ctx.save_for_backward`` included), as it was handed over."""
    saved: list[torch.Tensor] = []

    def pack(tensor):
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield saved


def storage_bytes(tensors) -> int:
    """The bytes of the distinct storages behind ``tensors`` (a tensor saved twice, or a view of another, counts
    once)."""
    seen = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr(), storage.nbytes()] = storage.nbytes()
    return sum(seen.values())


def tensors_held_by(root, leave_out=()) -> list[torch.Tensor]:
    """The tensors reachable from ``root`` (an optimizer, the context of an autograd function) through attributes,
    dicts, lists, tuples and sets, but those sharing storage with the tensors in ``leave_out`` (the parameters an
    optimizer updates, which the model holds anyway). Modules and functions are not entered."""
    import torch.nn as nn

    left_out = {t.untyped_storage().data_ptr() for t in leave_out}
    seen, found, todo = set(), [], [root]
    while todo:
        value = todo.pop()
        if id(value) in seen or isinstance(value, str | bytes | int | float | bool | type(None) | nn.Module):
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            if value.untyped_storage().data_ptr() not in left_out:
                found.append(value)
        elif isinstance(value, dict):
            todo += [*value.keys(), *value.values()]
        elif isinstance(value, list | tuple | set | frozenset):
            todo += list(value)
        elif hasattr(value, "__dict__") and not callable(value):
            todo += list(vars(value).values())
    return found


def bytes_held_by(root, leave_out=()) -> int:
    """The bytes of the distinct storages of ``tensors_held_by(root, leave_out)``."""
    return storage_bytes(tensors_held_by(root, leave_out))
