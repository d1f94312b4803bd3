"""Baseline of ``check_latency.py``: run a notebook's code cells (all but the test cells) in one fresh Python, no grader.

What running the notebook costs anyway, outside any grading: Python, the notebook's own imports (torch among
them) and its cells, run as the grader's worker runs them (an IPython shell, ``COURSE_GRADING=1``, in the
notebook's folder). A cell that raises (a stub) is reported and the next cells run. Prints one JSON line.
"""

import time

START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

os.environ.update(COURSE_GRADING="1", MPLBACKEND="Agg")
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

path = os.path.abspath(sys.argv[1])
os.chdir(os.path.dirname(path))
sys.path.insert(0, os.getcwd())
with open(path, encoding="utf-8") as handle:
    cells = json.load(handle)["cells"]
shell = InteractiveShell.instance()
failed = 0
for cell in cells:
    grader = cell.get("metadata", {}).get("nbgrader", {})
    if cell["cell_type"] != "code" or (grader.get("grade") and not grader.get("solution")):
        continue
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    result = shell.run_cell(source, silent=True)
    failed += not result.success
sys.stdout = sys.__stdout__
print(json.dumps({"cells_only": time.perf_counter() - START, "failed_cells": failed}), flush=True)
os._exit(0)  # as `check` ends: without the interpreter's teardown
