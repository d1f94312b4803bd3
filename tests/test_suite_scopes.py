"""The scopes by which pytest-xdist hands the suite to its workers (``SuiteScopes`` in tests/conftest.py).

Checked against pytest's own collection of this run: a test class, or a module's functions (a notebook's nbval
cells), is one scope, except that the classes executing a notebook's cells in the test process share one scope
per notebook, and the nbgrader classes graded in one course folder one scope per folder. Run alone, this file sees
only itself and skips.
"""

from __future__ import annotations

import pytest
from conftest import IN_PROCESS_FIXTURES, in_process_notebooks, longest_scopes, shared_scopes, suite_scope
from notebooks import ROOT


def _class(item) -> type | None:
    return getattr(item, "cls", None)  # a notebook's cell (nbval) has none


def _with_the_suite(items) -> bool:
    """Whether this run collected the notebooks' TestChecksNN classes, i.e. ran with the suite, not alone."""
    return any(getattr(_class(item), "__module__", None) == "test_checks" for item in items)


def _in_process(item) -> bool:
    return _class(item) is not None and bool(IN_PROCESS_FIXTURES & set(item.fixturenames))


def _expected(item, notebook_of: dict[str, str], in_process: set[type]) -> str:
    """A class stays whole: it is one notebook's scope when any of its tests executes that notebook, and its
    folder's when nbgrader grades its class with others."""
    path = item.path.resolve().relative_to(ROOT).as_posix()
    if _class(item) is None:
        return path
    if item.cls in in_process and f"{path}::{item.cls.__name__}" in notebook_of:
        return f"notebook {item.cls.notebook}"
    if path == "tests/test_nbgrader_e2e.py" and hasattr(item.cls, "notebook"):
        from test_nbgrader_e2e import graded_with

        return "nbgrader folder " + "+".join(graded_with(item.cls.notebook))
    return f"{path}::{item.cls.__name__}"


def test_each_class_or_module_is_one_scope_and_a_notebooks_in_process_classes_share_one(request):
    items = request.session.items
    if not _with_the_suite(items):
        pytest.skip("run with the suite: this run collected no notebook's test classes")
    notebook_of, shared = in_process_notebooks(), shared_scopes()
    in_process = {item.cls for item in items if _in_process(item)}
    wrong = {
        item.nodeid: (suite_scope(item.nodeid, shared), _expected(item, notebook_of, in_process))
        for item in items
        if suite_scope(item.nodeid, shared) != _expected(item, notebook_of, in_process)
    }
    assert not wrong, list(wrong.items())[:5]
    # Every class whose tests execute a notebook in the test process is known, or its notebook runs on both workers.
    unknown = {
        f"{item.path.name}::{item.cls.__name__}"
        for item in items
        if _in_process(item)
        and f"{item.path.resolve().relative_to(ROOT).as_posix()}::{item.cls.__name__}" not in notebook_of
    }
    assert not unknown, f"add these classes' modules to in_process_notebooks(): {sorted(unknown)}"


def test_the_scopes_queued_first_are_scopes_of_the_suite(request):
    """Each name ``longest_scopes`` queues first is a scope of this run: a renamed module or a regrouped folder
    would otherwise drop out of the queue's head unnoticed."""
    items = request.session.items
    if not _with_the_suite(items):
        pytest.skip("run with the suite: this run collected no notebook's test classes")
    shared = shared_scopes()
    scopes = {suite_scope(item.nodeid, shared) for item in items}
    assert set(longest_scopes()) <= scopes, sorted(set(longest_scopes()) - scopes)
