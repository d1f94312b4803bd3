"""Assertions for checks, each failing with a message written for the student."""

from __future__ import annotations

import torch

from autograder.errors import CheckFailed


def fail(message: str):
    raise CheckFailed(message)


def tensor(value, what: str, *, shape=None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``value`` as a tensor of the given shape and dtype, or a failure that says what it was."""
    if isinstance(value, dict) and "__unsupported__" in value:
        fail(f"{what} is a {value['__unsupported__']}, expected a torch.Tensor")
    if not isinstance(value, torch.Tensor):
        fail(f"{what} is a {type(value).__name__}, expected a torch.Tensor")
    if shape is not None and tuple(value.shape) != tuple(shape):
        fail(f"{what} has shape {list(value.shape)}, expected {list(shape)}")
    if dtype is not None and value.dtype != dtype:
        fail(f"{what} has dtype {value.dtype}, expected {dtype}")
    return value


def close(
    actual, expected: torch.Tensor, what: str, *, atol: float, rtol: float = 0.0, hint: str = "", alternatives=()
):
    """Fail unless ``actual`` is within ``atol + rtol*|expected|`` of ``expected`` everywhere.

    ``alternatives`` are ``(tensor, diagnosis)`` pairs of known mistakes: when the result
    matches one of them, the diagnosis is the message. Matching never raises: a known mistake of
    another shape is passed over.
    """
    actual = tensor(actual, what, shape=expected.shape)
    actual64, expected64 = actual.detach().double(), expected.detach().double()
    error = (actual64 - expected64).abs()
    bound = atol + rtol * expected64.abs()
    if torch.isfinite(actual64).all() and bool((error <= bound).all()):
        return
    for wrong, diagnosis in alternatives:
        if tuple(wrong.shape) != tuple(actual64.shape):  # a mistake of another shape cannot be this one
            continue
        if torch.allclose(actual64, wrong.detach().double(), atol=atol, rtol=rtol):
            fail(f"{what} is wrong: {diagnosis}")
    if not torch.isfinite(actual64).all():
        fail(f"{what} contains NaN or inf. {hint}".strip())
    worst = int((error - bound).argmax())
    index = list(torch.unravel_index(torch.tensor(worst), expected.shape)) if expected.dim() else []
    index = [int(i) for i in index]
    fail(
        f"{what} differs from the expected values by up to {float(error.max()):.3g} "
        f"(tolerance {atol:g}{f' + {rtol:g}*|expected|' if rtol else ''}); "
        f"at index {index} got {float(actual64.flatten()[worst]):.6g}, "
        f"expected {float(expected64.flatten()[worst]):.6g}. {hint}".strip()
    )


def that(condition: bool, message: str):
    if not condition:
        fail(message)


def gradients(result: dict, what: str) -> dict:
    """The parameter gradients an adapter reported, or a failure that says why there are none."""
    grads = result.get("grads")
    if isinstance(grads, str):
        fail(f"{what}: {grads}")
    that(isinstance(grads, dict), f"{what}: no gradients were computed")
    return grads


def no_loops(rule: str, runs: dict) -> None:
    """Fail unless every run did the same work (label -> ``adapters.lines_run``'s ``work``: lines of the student's
    code, torch calls, Python values given to torch; or, from an older adapter, the lines alone).

    How a "no Python loops" rule is graded: by what the code does, whatever it is written like.
    """
    works = {label: work if isinstance(work, dict) else {"lines of Python": work} for label, work in runs.items()}
    grew = [what for what in next(iter(works.values())) if len({work.get(what) for work in works.values()}) > 1]
    if grew:
        said = " and ".join(
            f"{', '.join(f'{works[label][what]} {what}' for what in grew)} for {label}" for label in works
        )
        fail(
            f"this exercise's rule is: {rule}; your code ran {said}, so it loops over the data (a for or while "
            "statement, a comprehension, or map, filter or itertools over the data: its work grows with the sizes)"
        )
