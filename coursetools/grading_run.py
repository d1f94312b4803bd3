"""Whether this run is a grading run, where a notebook's long demonstrations are cut short.

The grader runs every cell of a submission in its sandboxed worker (``autograder.sandbox`` sets
``COURSE_GRADING=1`` there) but grades only the exercises, so a training demonstration that takes
a minute for a student would only make a class's grading slow. Notebooks shrink such runs when
``being_graded()``; their outputs are never graded.
"""

import os

GRADING_ENV = "COURSE_GRADING"


def being_graded() -> bool:
    return os.environ.get(GRADING_ENV) == "1" or os.environ.get("NBGRADER_EXECUTION") == "autograde"
