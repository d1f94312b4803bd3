"""Adapters for notebook 00: the warm-up functions on tensors."""

from __future__ import annotations

import torch

from autograder.adapters import lines_run, need


def _strided(t: torch.Tensor) -> torch.Tensor:
    """The same values in column-major layout: not contiguous, as after a transpose or a slice."""
    return t.mT.contiguous().mT


def call(ns, name: str, args: list, strided: list[int] = ()):
    """What ``name(*args)`` returns, and the arguments afterwards (a check looks for in-place edits).

    The arguments at the positions in ``strided`` are passed non-contiguous.
    """
    args = [_strided(a) if i in strided else a for i, a in enumerate(args)]
    value = need(ns, name)(*args)
    return {"value": value, "args_after": args}


def one_hot(ns, tokens, vocab_size: int):
    """``one_hot(tokens, vocab_size)`` (the exercise's rule switches ``F.one_hot`` off: ``autograder.rules``)."""
    return {"value": need(ns, "one_hot")(tokens, vocab_size)}


def lines(ns, name: str, args: list) -> int:
    """How many lines of notebook code ``name(*args)`` runs (``lines_run``)."""
    return lines_run(need(ns, name), *args)["lines"]
