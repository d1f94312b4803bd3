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
    """Student code raised an exception; the message names it and the student's line."""


class SandboxError(Exception):
    """The process running student code hung, ended, or broke the protocol."""


class GradingError(RuntimeError):
    """This submission cannot be graded here at all (its scratch copy, or a limit, could not be made).

    Unlike ``SandboxError`` it is not the student's doing and costs no exercise: it stops the grading
    with one line, and the command line exits 2.
    """


def describe(error: BaseException) -> str:
    """One readable line for an exception from student code, naming the student's line."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith((_OURS, *_LIBRARIES)) and "site-packages" not in frame.filename
    ]
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
