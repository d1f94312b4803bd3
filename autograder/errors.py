"""The ways a check can go wrong, kept apart so that each gets its own message."""

from __future__ import annotations

import re
import sys
import traceback
from pathlib import Path

_OURS = str(Path(__file__).parent)
_LIBRARIES = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})


class CheckFailed(AssertionError):
    """The student's result is wrong; the message says how, and hints why."""


class StudentCodeError(Exception):
    """Student code raised an exception; the message names it and the student's line.

    ``stub``: it was the untouched stub's ``raise NotImplementedError()`` (no message), not a
    NotImplementedError that a library raised inside finished code (``is_stub``). ``rule``: it was a
    ``RuleBroken``, raised where the code called what the exercise forbids.
    """

    def __init__(self, message: str, stub: bool = False, rule: bool = False):
        super().__init__(message)
        self.stub = stub
        self.rule = rule


class RuleBroken(RuntimeError):
    """Raised inside the student's code when it calls what the exercise's rule forbids (``autograder.rules``).

    Its message says the rule and what broke it, and is shown as it is, without this class's name."""


def is_stub(error: BaseException) -> bool:
    """Whether ``error`` is what an unfinished answer raises: ``NotImplementedError()``, without a message.

    PyTorch raises NotImplementedError too (an operation with no kernel for these inputs), always with a
    message: finished code that meets one is failing, not "not implemented yet"."""
    return isinstance(error, NotImplementedError) and not error.args


class SandboxError(Exception):
    """The process running student code hung, ended, or broke the protocol."""


class WorkerDidNotStart(SandboxError):
    """A worker ended or hung before it said it was ready, so before any student code ran in it.

    ``reason`` is what it said last (or why it was stopped). ``process.StudentProcess`` decides whose
    failure that is: the grading set-up's when no student code has run in the submission's scratch
    folder yet (``GradingError``), else possibly the student's, whose earlier cells could have changed it.
    """

    def __init__(self, reason: str):
        super().__init__(f"the process for your code could not be started again: {reason}")
        self.reason = reason


class GradingError(RuntimeError):
    """This submission cannot be graded here at all: the grading set-up failed, not the student.

    Its scratch copy or a limit could not be made, or the worker failed before any student code ran
    (``could_not_grade``). Unlike ``SandboxError`` it is not the student's doing and is never a score:
    the command line says so in one line and exits 2, nbgrader's autograde of that submission fails,
    and ``grade-class`` lists the submission as "could not be graded".
    """


DOCTOR_HINT = "run `python -m autograder doctor` on this machine: it checks what grading needs, one line per item"


def could_not_grade(reason: str) -> GradingError:
    """The error for a worker that failed before any student code ran: the set-up's failure, with the fix."""
    return GradingError(
        f"could not be graded: the grader's worker failed before any student code ran ({reason}); {DOCTOR_HINT}"
    )


def cell_number(index: int) -> int:
    """The number a student reads for the notebook's cell at ``index`` (0-based, markdown cells included): the
    first cell of the notebook is cell 1, as people count (and JupyterLab's cell-numbering extensions do)."""
    return index + 1


def describe(error: BaseException) -> str:
    """One readable line for an exception from student code, naming the student's line."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith((_OURS, *_LIBRARIES)) and "site-packages" not in frame.filename
    ]
    if isinstance(error, RuleBroken):  # the rule and what broke it, as the student should read it
        text = str(error)
    else:
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
    if frames:
        last = frames[-1]
        text += f" (line {last.lineno} of {_where(last.filename)}, in {last.name})"
    return text


def _where(filename: str) -> str:
    """'cell 12' for the grader's cells, 'your cell' for a Jupyter kernel's, else the file."""
    if filename.startswith("<cell "):
        return filename.strip("<>")
    if re.search(r"ipykernel_\d+|<ipython-input-", filename):
        return "your cell"
    return filename
