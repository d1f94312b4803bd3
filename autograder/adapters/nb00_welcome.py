"""Adapters for notebook 00: the warm-up functions on tensors."""

from __future__ import annotations

import torch

from autograder.adapters import lines_run, need


def _strided(t: torch.Tensor) -> torch.Tensor:
    """The same values in column-major layout: not contiguous, as after a transpose or a slice."""
    return t.mT.contiguous().mT


def _layout(t) -> dict | None:
    """What an in-place method changes in a tensor besides its values: shape, strides, version counter.

    ``_version`` goes up with every in-place operation (``sub_``, ``unsqueeze_``), even one undone later.
    """
    if not isinstance(t, torch.Tensor):
        return None
    return {"shape": list(t.shape), "stride": list(t.stride()), "version": t._version}


def call(ns, name: str, args: list, strided: list[int] = (), same: bool = False):
    """What ``name(*args)`` returns, and the arguments afterwards (a check looks for in-place edits).

    The arguments at the positions in ``strided`` are passed non-contiguous. With ``same``, the first argument
    is passed twice (``name(x, x)``): one tensor as both inputs, as a caller may.
    """
    args = [_strided(a) if i in strided else a for i, a in enumerate(args)]
    if same:
        args = [args[0], args[0]]
    before = [_layout(a) for a in args]
    value = need(ns, name)(*args)
    return {"value": value, "args_after": args, "layout_before": before, "layout_after": [_layout(a) for a in args]}


def one_hot(ns, tokens, vocab_size: int):
    """``one_hot(tokens, vocab_size)`` (the exercise's rule switches ``F.one_hot`` off: ``autograder.rules``)."""
    return {"value": need(ns, "one_hot")(tokens, vocab_size)}


def lines(ns, name: str, args: list) -> int:
    """The work ``name(*args)`` does: lines of the student's code, torch calls (``lines_run``)."""
    return lines_run(need(ns, name), *args)["work"]
