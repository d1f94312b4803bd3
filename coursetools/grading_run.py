"""Whether this run is a grading run, and whether its long demonstrations run short.

The grader runs every cell of a submission in its sandboxed worker (``autograder.sandbox`` sets
``COURSE_GRADING=1`` there) but grades only the exercises, so a training demonstration that takes
a minute for a student would only make a class's grading slow. Notebooks shrink such runs when
``short_runs()``: while graded, and in the course's own test suite (``COURSE_SHORT_RUNS=1``,
set by ``tests/conftest.py`` for nbval's and the browser's kernels), where those cells' outputs are not
compared (``# NBVAL_IGNORE_OUTPUT``: they depend on the CPU). ``tools/outputs.py`` records every output at
full length.
"""

import os

GRADING_ENV = "COURSE_GRADING"
SHORT_RUNS_ENV = "COURSE_SHORT_RUNS"


def being_graded() -> bool:
    return os.environ.get(GRADING_ENV) == "1" or os.environ.get("NBGRADER_EXECUTION") == "autograde"


def short_runs() -> bool:
    """Whether a notebook's long demonstrations (training runs, timings, sampling) take a few steps only."""
    return being_graded() or os.environ.get(SHORT_RUNS_ENV) == "1"
