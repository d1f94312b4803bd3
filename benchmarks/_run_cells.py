"""Baseline of ``check_latency.py``: run a notebook's code cells (all but the test cells) in one fresh Python, no grader.

What running the notebook costs anyway, outside any grading: Python, the notebook's own imports (torch among
them) and its cells, run as the grader's worker runs them (an IPython shell, ``COURSE_GRADING=1``, in the
notebook's folder). A cell that raises (a stub) is reported and the next cells run. Prints one JSON line.
``worker_imports.py`` runs the same cells through ``run_code_cells``.
"""

import time

START = time.perf_counter()  # as a program, the baseline counts this Python's own start-up from here

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def run_code_cells(path: str) -> int:
    """Run the notebook at ``path``'s code cells but its test cells, in its folder, as the grader's worker does;
    return how many raised. IPython is imported here, so a caller can tell what the cells themselves import."""
    os.environ.update(COURSE_GRADING="1", MPLBACKEND="Agg")
    from IPython.core.interactiveshell import InteractiveShell

    path = os.path.abspath(path)
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
        failed += not shell.run_cell(source, silent=True).success
    sys.stdout = sys.__stdout__
    return failed


def main() -> None:
    failed = run_code_cells(sys.argv[1])
    print(json.dumps({"cells_only": time.perf_counter() - START, "failed_cells": failed}), flush=True)
    os._exit(0)  # as `check` ends: without the interpreter's teardown


if __name__ == "__main__":
    main()
