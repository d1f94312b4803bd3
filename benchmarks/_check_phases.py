"""Driver of ``check_latency.py``: grade one notebook as ``python -m autograder check`` does, timing its phases.

Run by a tree's own Python in that tree (``TREE/.venv/bin/python benchmarks/_check_phases.py NB SANDBOXED``), so
the same driver times the code before and after a change. It wraps, without changing what they do:
``Worker.__init__`` (the worker starting: bubblewrap, Python, its imports; once the worker starts before
the checks are imported, ``__init__`` only starts it and ``Worker.ready`` is the wait for what is left of its
start, while the imports of the checks, which overlap it, fall in ``other``), ``StudentProcess.run_cells`` (the
notebook's own cells, less the worker's start when it happens inside), each check (``autograder.exercises.run_check``, visible and hidden apart),
``StudentProcess.close`` and ``Sandbox.cleanup`` (teardown). Prints one JSON line of seconds, then exits
as ``check`` does.
"""

import time

START = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402

import autograder.__main__  # noqa: E402, F401 - the command line's own imports, timed
from autograder import exercises, grading, process, sandbox  # noqa: E402

IMPORTED = time.perf_counter()
phases = {"identify": 0.0, "worker_start": 0.0, "cells": 0.0, "visible": 0.0, "hidden": 0.0, "close": 0.0, "cleanup": 0.0}


def timed(owner, name, phase):
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start, before = time.perf_counter(), phases["worker_start"]
        try:
            return original(*args, **kwargs)
        finally:
            key = phase(*args) if callable(phase) else phase
            phases[key] += time.perf_counter() - start - (phases["worker_start"] - before if key == "cells" else 0)

    setattr(owner, name, wrapper)


timed(process.Worker, "__init__", "worker_start")
if hasattr(process.Worker, "ready"):  # after the change: __init__ only starts it, ready() waits for it
    timed(process.Worker, "ready", "worker_start")
timed(process.StudentProcess, "run_cells", "cells")
timed(grading, "identify", "identify")  # which notebook: imports every checks module, and so torch
timed(exercises, "run_check", lambda check, impl: "hidden" if check.hidden else "visible")
timed(process.StudentProcess, "close", "close")
timed(sandbox.Sandbox, "cleanup", "cleanup")

path, sandboxed = sys.argv[1], sys.argv[2] == "1"
start = time.perf_counter()
report = grading.grade_file(path, sandboxed=sandboxed)
phases["grade"] = time.perf_counter() - start
phases["imports"] = IMPORTED - START
phases["score"], phases["max_score"] = report.score, report.max_score
print(json.dumps(phases), flush=True)
cli = sys.modules["autograder.__main__"]
if hasattr(cli, "_exit_now"):  # end as `check` ends, in a tree where it skips the interpreter's teardown
    cli._exit_now(0)
