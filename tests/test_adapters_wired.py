"""The seam between checks and adapters is wired right before any student meets it.

A notebook's module (``autograder/notebooks/nb<notebook>.py``) holds its checks and its adapters; a check reaches
the student's code only through an adapter of its own module, by reference (``impl.call(some_adapter, ...)``), so
a misspelt adapter is an undefined name (ruff's F821, at ``make lint``), never a grading error in a student's
report. These tests hold every ``impl.call`` of a check to a function of the module marked ``@adapter``, and each
adapter to a check that calls it (an adapter no check calls is dead code beside student objects); no check
reaches the student's code any other way. ``adapters.resolve`` refuses anything else at run time, in the worker
as in the notebook's kernel. The exercise index that ``check("id")`` uses is read from the modules'
declarations; it must name every exercise of every notebook, and nothing else.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from autograder.adapters import resolve
from autograder.exercises import checks_for, exercise_index, find_exercise, module_name
from autograder.impl import LocalImpl, reference
from autograder.notebooks import NOTEBOOKS

ROOT = Path(__file__).resolve().parents[1]


def _module(notebook: str):
    return importlib.import_module(f"autograder.notebooks.{module_name(notebook)}")


def _tree(notebook: str) -> ast.AST:
    return ast.parse(Path(_module(notebook).__file__).read_text(encoding="utf-8"))


def _impl_calls(notebook: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(_tree(notebook))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "call"
        and getattr(node.func.value, "id", None) == "impl"
    ]


def _adapters(notebook: str) -> set[str]:
    module = _module(notebook)
    return {
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__ and getattr(value, "__adapter__", False)
    }


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_checks_reach_student_code_only_through_impl_call(notebook):
    """Every use of ``impl`` is ``impl.call(<adapter>, ...)`` (or ``with_rules``), the adapter a name of this
    module, and the module is the one the worker imports for this notebook."""
    tree = _tree(notebook)
    uses = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "impl"
    }
    assert uses <= {"call", "with_rules"}, uses
    for node in _impl_calls(notebook):
        assert node.args and isinstance(node.args[0], ast.Name), (
            f"line {node.lineno}: impl.call's first argument must be an adapter of this module, by name"
        )
    assert _module(notebook).__name__ == checks_for(notebook).adapter_module


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_adapter_a_check_calls_exists_and_every_adapter_is_called(notebook):
    called = {node.args[0].id for node in _impl_calls(notebook)}
    defined = _adapters(notebook)
    assert called - defined == set(), f"checks of {notebook} call functions that are not marked @adapter"
    assert defined - called == set(), f"adapters no check of {notebook} calls (unmark helpers, make them _private)"


def test_only_this_notebooks_adapters_can_be_called():
    module = _module("06_feed_forward")
    assert resolve(module, reference(module.fused_forward)) is module.fused_forward
    # a helper, a check, an oracle, imports, nothing
    for name in ("_products_made", "test_ffn_gradients", "ffn_oracle", "need", "torch", "no_such_adapter", "__name__"):
        with pytest.raises(LookupError):
            resolve(module, f"{module.__name__}:{name}")
    other = _module("02_normalization")
    with pytest.raises(LookupError):  # another notebook's adapter, named through this one's
        resolve(module, reference(other.norm_forward))
    impl = LocalImpl({}, module.__name__)
    with pytest.raises(LookupError):
        impl.call(other.norm_forward)


def test_the_exercise_index_names_every_exercise_and_nothing_else():
    declared = {e.id: notebook for notebook in NOTEBOOKS for e in checks_for(notebook).exercises}
    assert exercise_index() == declared
    assert find_exercise("layer_norm")[1].endswith("nb02_normalization")
    with pytest.raises(LookupError):
        find_exercise("no_such_exercise")
