"""Where one graded submission's seconds go (issue 38 §3): notebook 02's solution, sandboxed, as nbgrader grades it.

Grades ``solutions/02_normalization`` in this process with ``grade_file`` (sandboxed, the worker's outputs
recorded as ``nbgrader autograde`` records them, and not recorded), ``--repeats`` times each, interleaved after
one untimed warm-up, and splits each grading by the phases the grader reports (``autograder.phases``): the
worker's start (bubblewrap, Python, torch, IPython, the adapters), the notebook's cells, the checks. Each is
measured with workers forked from the zygote (``autograder/zygote.py``, the default) and started cold
(``AUTOGRADER_COLD_WORKERS=1``), interleaved. It also
times, in fresh processes, what the worker's start cannot avoid: ``python -I -B -c "import torch"`` and the
same with IPython's shell and with ``matplotlib.pyplot`` (which the notebook's first cell imports).

    .venv/bin/python benchmarks/submission_breakdown.py --repeats 5 --write benchmarks/submission_breakdown.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import command, load_average, machine, now

from autograder.zygote import COLD_ENV

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "solutions" / "02_normalization" / "02_normalization.ipynb"
STARTS = {"warm": "forked from the zygote", "cold": "started cold"}
IMPORTS = {
    "python alone": "pass",
    "import torch": "import torch",
    "torch + IPython's shell": "import torch; from IPython.core.interactiveshell import InteractiveShell",
    "torch + matplotlib.pyplot": "import torch; import matplotlib.pyplot",
}


def graded_once(record: bool) -> dict[str, float]:
    from autograder.grading import grade_file

    seconds: dict[str, float] = {"starting": 0.0, "cells": 0.0, "checks": 0.0}
    current = {"kind": None, "since": 0.0}

    def on_phase(phase) -> None:
        moment = time.perf_counter()
        if current["kind"] in seconds:
            seconds[current["kind"]] += moment - current["since"]
        current.update(kind=phase.kind, since=moment)

    began = time.perf_counter()
    report = grade_file(NOTEBOOK, sandboxed=True, record=record, on_phase=on_phase)
    ended = time.perf_counter()
    seconds[current["kind"]] += ended - current["since"]
    assert report.score == report.max_score, report.to_json()
    seconds["total"] = ended - began
    return seconds


def import_seconds(repeats: int) -> dict[str, float]:
    times = {}
    for label, code in IMPORTS.items():
        runs = []
        for _ in range(repeats):
            began = time.perf_counter()
            subprocess.run([sys.executable, "-I", "-B", "-c", code], check=True)
            runs.append(time.perf_counter() - began)
        times[label] = statistics.median(runs)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write", type=Path, help="write the Markdown table here")
    args = parser.parse_args()
    before = load_average()
    graded_once(record=True)  # warm-up: the checker's own imports, and the zygote's
    runs: dict[tuple[str, bool], list[dict]] = {(start, record): [] for start in STARTS for record in (True, False)}
    for _ in range(args.repeats):
        for start, record in runs:
            os.environ.pop(COLD_ENV, None)
            if start == "cold":
                os.environ[COLD_ENV] = "1"
            runs[start, record].append(graded_once(record))
    os.environ.pop(COLD_ENV, None)
    imports = import_seconds(args.repeats)
    lines = [
        "# One graded submission of notebook 02, phase by phase",
        "",
        f"- command: `{command()}`",
        f"- date: {now()}",
        f"- machine: {machine()}",
        f"- load average (1, 5, 15 min): before {before}, after {load_average()}",
        "",
        f"Medians of {args.repeats} sandboxed gradings each (`grade_file`, in one process, after a warm-up), seconds:",
        "",
        "| worker | outputs recorded (as nbgrader autograde) | worker start | cells | checks | total |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (start, record), done in runs.items():
        median = {k: statistics.median(r[k] for r in done) for k in done[0]}
        lines.append(
            f"| {STARTS[start]} | {'yes' if record else 'no'} | {median['starting']:.2f} | {median['cells']:.2f} | "
            f"{median['checks']:.2f} | {median['total']:.2f} |"
        )
    lines += ["", "Fresh processes (`python -I -B -c ...`, median wall seconds):", "", "| what | s |", "|---|---:|"]
    lines += [f"| {label} | {seconds:.2f} |" for label, seconds in imports.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        args.write.write_text(text)


if __name__ == "__main__":
    main()
