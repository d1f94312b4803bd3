"""Every check fails on the untouched stubs, saying "not implemented yet".

That every check passes on the solutions is nbval's to show: each solution notebook's test cells run every
visible and then every hidden check of their exercise in a real kernel, and print a ✓ line per check, which
nbval compares with the committed outputs (a failing check prints ✗ and raises, and the notebook fails). Running
them again here cost the suite about 80 s of its 2 cores (benchmarks/suite_time.md, 2026-11-29).

The checks run here exactly as in a notebook (``LocalImpl``); the sandboxed path that
grading uses is exercised on whole notebooks by every notebook's ``full`` and ``stub``
students in ``test_nbgrader_e2e.py`` (and the command line's, with its report format, in
``test_sandbox.py``). One test class per notebook
(``TestChecksNN``), so pytest-xdist (``--dist loadscope``) spreads the notebooks over its workers.
"""

from __future__ import annotations

from notebooks import NOTEBOOKS

from autograder.exercises import NOT_IMPLEMENTED, checks_for, run_check
from autograder.impl import LocalImpl


def pytest_generate_tests(metafunc):
    if "check" in metafunc.fixturenames:
        exercises = checks_for(metafunc.cls.notebook).exercises
        metafunc.parametrize(
            "check",
            [c for e in exercises for c in e.checks],
            ids=[f"{e.id}::{c.name}" for e in exercises for c in e.checks],
        )


class _NotebookChecks:
    notebook: str

    def _impl(self, namespaces):
        return LocalImpl(namespaces[self.notebook], checks_for(self.notebook).adapter_module)

    def test_check_fails_on_stub(self, check, stub_namespaces):
        result = run_check(check, self._impl(stub_namespaces))
        assert not result.passed
        assert result.message.startswith(NOT_IMPLEMENTED), result.message


for _notebook in NOTEBOOKS:
    _name = f"TestChecks{_notebook[:2]}"
    globals()[_name] = type(_name, (_NotebookChecks,), {"notebook": _notebook})


def test_a_library_notimplementederror_in_finished_code_is_not_a_stub():
    """Only the stub's bare ``raise NotImplementedError()`` means "not implemented yet"; PyTorch's own
    NotImplementedError (an operation with no kernel for these inputs) inside finished code is a failure
    of that code, reported as what it raised."""
    from autograder.errors import StudentCodeError
    from autograder.exercises import Check

    def raising(error):
        def check(impl):
            raise error

        return Check(check, hidden=False)

    library = StudentCodeError("NotImplementedError: Could not run 'aten::add' with arguments (line 3 of your cell)")
    result = run_check(raising(library), impl=None)
    assert not result.message.startswith(NOT_IMPLEMENTED) and "Could not run 'aten::add'" in result.message, result
    stub = StudentCodeError("NotImplementedError (line 7 of your cell, in forward)", stub=True)
    assert run_check(raising(stub), impl=None).message.startswith(NOT_IMPLEMENTED)


def test_the_worker_tells_the_stub_from_a_library_notimplementederror():
    from autograder.errors import is_stub

    assert is_stub(NotImplementedError())
    assert not is_stub(NotImplementedError("Could not run 'aten::_foo' with arguments from the 'CPU' backend"))
    assert not is_stub(ValueError())
