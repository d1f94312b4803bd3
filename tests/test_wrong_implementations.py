"""Plausible wrong implementations are rejected, each with a message that names the mistake.

One test class per notebook (``TestWrongNN``), so pytest-xdist spreads the notebooks.
"""

from __future__ import annotations

import re

import torch
from notebooks import NOTEBOOKS
from wrong import PRELUDE, solution_answers, wrong_versions

from autograder import expect
from autograder.exercises import checks_for, find_exercise, run_exercise
from autograder.feedback import render, shown_by_test_cell
from autograder.impl import LocalImpl


def pytest_generate_tests(metafunc):
    if "wrong" in metafunc.fixturenames:
        wrongs = wrong_versions(metafunc.cls.notebook)
        metafunc.parametrize("wrong", wrongs, ids=[f"{w.exercise}: {w.mistake}" for w in wrongs])


_GRADED: dict = {}  # (notebook, exercise, code) -> result: two tests read each wrong version's grade


def _grade(namespaces, notebook, exercise_id, code):
    key = (notebook, exercise_id, code)
    if key not in _GRADED:
        _GRADED[key] = _run(namespaces, notebook, exercise_id, code)
    return _GRADED[key]


def _run(namespaces, notebook, exercise_id, code):
    namespace = dict(namespaces[notebook])
    exec(compile(PRELUDE + code, "<answer>", "exec"), namespace)
    exercise, adapters = find_exercise(exercise_id)
    # As graded: the rules are read from the answer cell too (its imports: the notebooks' setup cell).
    return run_exercise(exercise, LocalImpl(namespace, adapters), source=code, context=[PRELUDE])


def _numbers_aside(text: str) -> str:
    """A diagnosis with its numbers as ``#``: one mistake, whatever sizes or seeds the check happened to use."""
    return re.sub(r"\d+(\.\d+)?", "#", text)


_SOLUTION_GRADES: dict = {}  # notebook -> (results, offered): two tests read the solutions' grades


def _solution_grades(namespaces, notebook):
    """Every solution answer of ``notebook`` graded once, and the diagnoses its checks held ready meanwhile
    (``expect.close``'s ``alternatives``, numbers aside -> as offered), recorded as the checks ran."""
    if notebook not in _SOLUTION_GRADES:
        offered, close = {}, expect.close

        def recording(*args, alternatives=(), **kwargs):
            alternatives = list(alternatives)
            offered.update({_numbers_aside(diagnosis): diagnosis for _, diagnosis in alternatives})
            return close(*args, alternatives=alternatives, **kwargs)

        expect.close = recording
        try:
            results = [_run(namespaces, notebook, e, code) for e, code in solution_answers(notebook).items()]
        finally:
            expect.close = close
        _SOLUTION_GRADES[notebook] = results, offered
    return _SOLUTION_GRADES[notebook]


class _WrongImplementations:
    notebook: str

    def test_wrong_implementation_is_rejected_with_its_message(self, wrong, solution_namespaces):
        result = _grade(solution_namespaces, self.notebook, wrong.exercise, wrong.code)
        assert not result.passed, f"{wrong.mistake!r} passed every check"
        assert wrong.says in result.message, result.message

    def test_the_test_cell_names_the_mistake(self, wrong, solution_namespaces):
        """The notebook's own test cell, not only the grade, names every catalogued mistake (issue 24): what it
        shows (its visible checks, then, once they pass, the hidden ones) says what is wrong."""
        shown = shown_by_test_cell(_grade(solution_namespaces, self.notebook, wrong.exercise, wrong.code))
        assert not shown.passed, f"{wrong.mistake!r}: the test cell shows no failure"
        assert wrong.says in render(shown), render(shown)

    def test_the_templates_are_right_when_unbroken(self, solution_namespaces):
        """The wrong versions differ from a right one only by the mistake."""
        results, _ = _solution_grades(solution_namespaces, self.notebook)
        for result in results:
            assert result.passed, result.message

    def test_every_exercise_has_three_wrong_implementations(self):
        counts = {e.id: 0 for e in checks_for(self.notebook).exercises}
        for wrong in wrong_versions(self.notebook):
            counts[wrong.exercise] += 1
        assert min(counts.values()) >= 3, counts

    def test_every_mistake_a_check_names_has_a_wrong_version(self, solution_namespaces):
        """The checks' known mistakes and the catalogue of wrong versions are one list, not two: every diagnosis a
        check holds ready (``expect.close``'s ``alternatives``, recorded while the solution is graded), its numbers
        aside, is the message of some wrong version here. One that none gets is a mistake known only to the check,
        whose message was never seen to fire: write the wrong version that makes it (or, when no code can, drop it
        from the check)."""
        _, offered = _solution_grades(solution_namespaces, self.notebook)
        said = "\n".join(
            _numbers_aside(r.message)
            for wrong in wrong_versions(self.notebook)
            for r in _grade(solution_namespaces, self.notebook, wrong.exercise, wrong.code).results
            if not r.passed
        )
        unseen = sorted(diagnosis for family, diagnosis in offered.items() if family not in said)
        assert not unseen, "diagnoses that no wrong version in tests/wrong gets:\n" + "\n".join(unseen)

    def test_every_check_rejects_some_wrong_implementation(self, solution_namespaces):
        """No check is dead weight: each one fails at least one of the plausible mistakes."""
        caught = set()
        for wrong in wrong_versions(self.notebook):
            result = _grade(solution_namespaces, self.notebook, wrong.exercise, wrong.code)
            caught |= {r.check.name for r in result.results if not r.passed}
        every = {c.name for e in checks_for(self.notebook).exercises for c in e.checks}
        assert every - caught == set(), "checks that no wrong implementation fails"


for _notebook in NOTEBOOKS:
    _name = f"TestWrong{_notebook[:2]}"
    globals()[_name] = type(_name, (_WrongImplementations,), {"notebook": _notebook})


def test_a_wrong_exercise_costs_only_itself(solution_namespaces):
    """Notebook 06: FeedForward and SwiGLU are graded with PyTorch's activations in place of the student's."""
    from wrong.edits import activations

    wrong_activations = activations(gelu="x * torch.sigmoid(1.702 * x)", silu="x * torch.sigmoid(2 * x)")
    assert not _grade(solution_namespaces, "06_feed_forward", "ffn_activations", wrong_activations).passed
    namespace = dict(solution_namespaces["06_feed_forward"])
    exec(compile(PRELUDE + wrong_activations, "<answer>", "exec"), namespace)
    for exercise_id in ("feed_forward", "swiglu"):
        exercise, adapters = find_exercise(exercise_id)
        result = run_exercise(exercise, LocalImpl(namespace, adapters))
        assert result.passed, result.message
    assert namespace["gelu"] is not torch.nn.functional.gelu  # the student's own are back afterwards
