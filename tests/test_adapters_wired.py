"""The seam between checks and adapters is wired right before any student meets it.

A check reaches its notebook's adapters by reference (``impl.call(adapters.<adapter>, ...)``, ``adapters`` its
notebook's adapter module): a misspelt one would surface as a grading error in a student's report. These tests
read every checks module and hold each adapter it names to a public function defined in its adapter module, and
each such function to a check that calls it (an adapter no check calls is dead code beside student objects);
no check reaches the student's code any other way. ``adapters.resolve`` refuses anything else at run time, in
the worker as in the notebook's kernel. The exercise index that ``check("id")`` uses is read from the
checks modules' declarations; it must name every exercise of every notebook, and nothing else.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from autograder.adapters import resolve
from autograder.checks import NOTEBOOKS
from autograder.exercises import checks_for, exercise_index, find_exercise, module_name
from autograder.impl import LocalImpl, reference

ROOT = Path(__file__).resolve().parents[1]


def _tree(notebook: str) -> ast.AST:
    return ast.parse((ROOT / "autograder" / "checks" / f"{module_name(notebook)}.py").read_text(encoding="utf-8"))


def _called_by_checks(notebook: str) -> set[str]:
    return {
        node.attr
        for node in ast.walk(_tree(notebook))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "adapters"
    }


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_checks_reach_student_code_only_through_impl_call(notebook):
    """Every use of ``impl`` is ``impl.call(adapters.<name>, ...)`` (or ``_with_rules``), and ``adapters`` is the
    notebook's own adapter module."""
    tree = _tree(notebook)
    uses = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "impl"
    }
    assert uses <= {"call", "_with_rules"}, uses
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "call":
            if getattr(node.func.value, "id", None) == "impl":
                first = node.args[0]
                assert isinstance(first, ast.Attribute) and getattr(first.value, "id", None) == "adapters", (
                    f"line {node.lineno}: impl.call's first argument must be adapters.<name>"
                )
    module = importlib.import_module(f"autograder.checks.{module_name(notebook)}")
    assert module.adapters.__name__ == checks_for(notebook).adapter_module


def _public_adapters(notebook: str) -> set[str]:
    module = importlib.import_module(checks_for(notebook).adapter_module)
    return {
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
    }


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_adapter_a_check_calls_exists_and_every_adapter_is_called(notebook):
    called, defined = _called_by_checks(notebook), _public_adapters(notebook)
    assert called - defined == set(), f"checks call adapters that {notebook}'s adapter module does not define"
    assert defined - called == set(), f"public adapters no check of {notebook} calls (make helpers _private)"


def test_only_this_notebooks_public_adapters_can_be_called():
    module = importlib.import_module(checks_for("06_feed_forward").adapter_module)
    assert resolve(module, reference(module.fused_forward)) is module.fused_forward
    for name in ("_products_made", "need", "torch", "no_such_adapter", "__name__"):  # a helper, imports, nothing
        with pytest.raises(LookupError):
            resolve(module, f"{module.__name__}:{name}")
    other = importlib.import_module(checks_for("02_normalization").adapter_module)
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
