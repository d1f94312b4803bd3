"""The ways a check can go wrong, kept apart so that each gets its own message."""

from __future__ import annotations

import linecache
import re
import sys
import traceback
import types
from pathlib import Path

_OURS = str(Path(__file__).parent)
_LIBRARIES = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})


class CheckFailed(AssertionError):
    """The student's result is wrong; the message says how, and hints why."""


class StudentCodeError(Exception):
    """Student code raised an exception; the message names it and the student's line.

    ``stub``: it was the untouched stub's ``raise NotImplementedError()`` (no message), not a
    NotImplementedError that a library raised inside finished code (``is_stub``). ``rule``: it was a
    ``RuleBroken``, raised where the code called what the exercise forbids. ``ran_out``: it did not finish within
    its time limit (``TimeLimitExceeded``), or it is code that did not earlier (``RanOutBefore``).
    """

    def __init__(self, message: str, stub: bool = False, rule: bool = False, ran_out: bool = False):
        super().__init__(message)
        self.stub = stub
        self.rule = rule
        self.ran_out = ran_out


class RuleBroken(RuntimeError):
    """Raised inside the student's code when it calls what the exercise's rule forbids (``autograder.rules``).

    Its message says the rule and what broke it, and is shown as it is, without this class's name."""


def is_stub(error: BaseException) -> bool:
    """Whether ``error`` is what an unfinished answer raises: ``NotImplementedError()``, without a message.

    PyTorch raises NotImplementedError too (an operation with no kernel for these inputs), always with a
    message: finished code that meets one is failing, not "not implemented yet"."""
    return isinstance(error, NotImplementedError) and not error.args


class TimeLimitExceeded(BaseException):
    """Student code was still running when its time ran out (``autograder.time_limit``).

    A BaseException, so that a student's ``except Exception`` does not swallow it."""

    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.seconds = seconds

    def __str__(self) -> str:
        return f"did not finish within {self.seconds:g} s (an infinite loop, or far too slow)"


class RanOutBefore(TimeLimitExceeded):
    """Raised at once by student code that ran out of time earlier in this process (``time_limit.skip_from_now_on``);
    ``where`` names that code."""

    def __init__(self, seconds: float, where: str):
        super().__init__(seconds)
        self.where = where

    def __str__(self) -> str:
        return (
            f"was not run again: when it was first called it did not finish within {self.seconds:g} s; "
            f"it was running {self.where}"
        )


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


def _is_students(filename: str) -> bool:
    """Whether code from ``filename`` is the student's: not the grader's, not a library's."""
    return not (filename.startswith((_OURS, *_LIBRARIES, "<autograder")) or "site-packages" in filename)


def student_frames(tb: types.TracebackType | None) -> list[types.FrameType]:
    """The frames of a traceback that run the student's code, outermost first."""
    frames = []
    while tb is not None:
        if _is_students(tb.tb_frame.f_code.co_filename):
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def last_student_line(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost line of the student's code in ``error``'s traceback (None if it has none)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if _is_students(frame.filename)]
    return frames[-1] if frames else None


def describe(error: BaseException) -> str:
    """One readable line for an exception from student code, naming the student's line."""
    last = last_student_line(error)
    if isinstance(error, RuleBroken | TimeLimitExceeded):  # says what (and where), as the student should read it
        text = str(error)
    else:
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
    if last is None or isinstance(error, RanOutBefore):
        return text
    if isinstance(error, TimeLimitExceeded):
        return f"{text}: it was running {where_running(last)}"
    return f"{text} (line {last.lineno} of {_where(last.filename)}, in {last.name})"


def running_line(error: BaseException) -> str | None:
    """Where the student's code was when ``error`` stopped it (``where_running``), or None outside their code."""
    last = last_student_line(error)
    return where_running(last) if last is not None else None


def where_running(frame: traceback.FrameSummary) -> str:
    """``line 7 of cell 9, in forward: `while True:` `` (the line's text where it is known)."""
    text = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
    quoted = f": `{text}`" if text else ""
    return f"line {frame.lineno} of {_where(frame.filename)}, in {frame.name}{quoted}"


def _where(filename: str) -> str:
    """'cell 12' for the grader's cells, 'your cell In[5]' for a Jupyter kernel's (the number JupyterLab shows
    beside it), else the file."""
    if filename.startswith("<cell "):
        return filename.strip("<>")
    if re.search(r"ipykernel_\d+|<ipython-input-", filename):
        number = _execution_count(filename)
        return f"your cell In[{number}]" if number is not None else "your cell"
    return filename


def _execution_count(filename: str) -> int | None:
    """The execution count IPython gave the cell compiled as ``filename`` (None outside IPython)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(getattr(shell, "compile", None), "_filename_map", {}).get(filename)
