"""Plausible wrong implementations are rejected, each with a message that names the mistake."""

from __future__ import annotations

import importlib

import pytest
from notebooks import NOTEBOOKS
from wrong import PRELUDE

from autograder.exercises import checks_for, find_exercise, run_exercise
from autograder.impl import LocalImpl

MODULES = {notebook: importlib.import_module(f"wrong.nb{notebook}") for notebook in NOTEBOOKS}
CASES = [
    pytest.param(notebook, wrong, id=f"{wrong.exercise}: {wrong.mistake}")
    for notebook, module in MODULES.items()
    for wrong in module.WRONG
]


def _grade(namespaces, notebook, exercise_id, code):
    namespace = dict(namespaces[notebook])
    exec(compile(PRELUDE + code, "<answer>", "exec"), namespace)
    exercise, adapters = find_exercise(exercise_id)
    return run_exercise(exercise, LocalImpl(namespace, adapters))


@pytest.mark.parametrize("notebook, wrong", CASES)
def test_wrong_implementation_is_rejected_with_its_message(notebook, wrong, solution_namespaces):
    result = _grade(solution_namespaces, notebook, wrong.exercise, wrong.code)
    assert not result.passed, f"{wrong.mistake!r} passed every check"
    assert wrong.says in result.message, result.message


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_templates_are_right_when_unbroken(notebook, solution_namespaces):
    """The wrong versions differ from a right one only by the mistake."""
    for exercise_id, code in MODULES[notebook].RIGHT.items():
        result = _grade(solution_namespaces, notebook, exercise_id, code)
        assert result.passed, result.message


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_exercise_has_three_wrong_implementations(notebook):
    counts = {e.id: 0 for e in checks_for(notebook).exercises}
    for wrong in MODULES[notebook].WRONG:
        counts[wrong.exercise] += 1
    assert min(counts.values()) >= 3, counts


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_check_rejects_some_wrong_implementation(notebook, solution_namespaces):
    """No check is dead weight: each one fails at least one of the plausible mistakes."""
    caught = set()
    for wrong in MODULES[notebook].WRONG:
        result = _grade(solution_namespaces, notebook, wrong.exercise, wrong.code)
        caught |= {r.check.name for r in result.results if not r.passed}
    every = {c.name for e in checks_for(notebook).exercises for c in e.checks}
    assert every - caught == set(), "checks that no wrong implementation fails"
