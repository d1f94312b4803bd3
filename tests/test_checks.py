"""Every check passes on the solutions and fails on the untouched stubs.

The checks run here exactly as in a notebook (``LocalImpl``); the sandboxed path that
grading uses is exercised on whole notebooks through the command line.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from notebooks import NOTEBOOKS, release_path, solution_path

from autograder.exercises import NOT_IMPLEMENTED, checks_for, run_check
from autograder.impl import LocalImpl

ALL_CHECKS = [
    pytest.param(notebook, check, id=f"{notebook}::{exercise.id}::{check.name}")
    for notebook in NOTEBOOKS
    for exercise in checks_for(notebook).exercises
    for check in exercise.checks
]


def _impl(namespaces, notebook):
    return LocalImpl(namespaces[notebook], checks_for(notebook).adapter_module)


@pytest.mark.parametrize("notebook, check", ALL_CHECKS)
def test_check_passes_on_solution(notebook, check, solution_namespaces):
    result = run_check(check, _impl(solution_namespaces, notebook))
    assert result.passed, result.message


@pytest.mark.parametrize("notebook, check", ALL_CHECKS)
def test_check_fails_on_stub(notebook, check, stub_namespaces):
    result = run_check(check, _impl(stub_namespaces, notebook))
    assert not result.passed
    assert result.message.startswith(NOT_IMPLEMENTED), result.message


def _cli(path):
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "check", str(path), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_cli_gives_solutions_full_marks(notebook):
    status, report = _cli(solution_path(notebook))
    exercises = checks_for(notebook).exercises
    assert status == 0, report
    assert report["notebook"] == notebook
    assert report["score"] == report["max_score"] == sum(e.points for e in exercises)
    assert [e["id"] for e in report["exercises"]] == [e.id for e in exercises]
    for entry in report["exercises"]:
        assert set(entry) == {"id", "passed", "points", "max_points", "message"}
        assert entry["passed"] and entry["points"] == entry["max_points"]


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_cli_gives_stubs_zero_and_says_why(notebook):
    status, report = _cli(release_path(notebook))
    assert status == 1
    assert report["score"] == 0
    for entry in report["exercises"]:
        assert not entry["passed"] and entry["points"] == 0
        assert NOT_IMPLEMENTED in entry["message"], entry["message"]
