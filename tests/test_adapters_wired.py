"""The seam between checks and adapters is wired right before any student meets it.

A check reaches its notebook's adapters by name (``impl.<adapter>(...)``): a misspelt name would surface as a
grading error in a student's report. These tests read every checks module and hold each name it calls to a
public function defined in its adapter module, and each such function to a check that calls it (an adapter
no check calls is dead code beside student objects). ``adapters.adapter`` refuses anything else at run time,
in the worker as in the notebook's kernel. The exercise index that ``check("id")`` uses is read from the
checks modules' declarations; it must name every exercise of every notebook, and nothing else.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from autograder.adapters import adapter
from autograder.checks import NOTEBOOKS
from autograder.exercises import checks_for, exercise_index, find_exercise, module_name

ROOT = Path(__file__).resolve().parents[1]


def _called_by_checks(notebook: str) -> set[str]:
    source = (ROOT / "autograder" / "checks" / f"{module_name(notebook)}.py").read_text(encoding="utf-8")
    return {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "impl"
    } - {"_with_rules"}


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


def test_only_public_adapters_can_be_called():
    module = importlib.import_module(checks_for("06_feed_forward").adapter_module)
    assert adapter(module, "fused_forward") is module.fused_forward
    for name in ("_products_made", "need", "torch", "no_such_adapter", "__name__"):  # a helper, imports, nothing
        with pytest.raises(LookupError):
            adapter(module, name)


def test_the_exercise_index_names_every_exercise_and_nothing_else():
    declared = {e.id: notebook for notebook in NOTEBOOKS for e in checks_for(notebook).exercises}
    assert exercise_index() == declared
    assert find_exercise("layer_norm")[1].endswith("nb02_normalization")
    with pytest.raises(LookupError):
        find_exercise("no_such_exercise")
