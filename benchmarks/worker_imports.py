"""What each solution notebook's graded run imports beyond what every worker imports, against ``WORKER_IMPORTS``.

``autograder.notebooks.WORKER_IMPORTS`` names, per notebook, the modules its grading workers import before any
student code (the grader's zygote imports them once for a whole class). This measures what to put there: for each
solution notebook, a fresh Python imports what every worker imports (``autograder.worker.preload``) and the
notebook's adapters, as a worker does, then runs the notebook's code cells (all but the test cells, as the grader
does, ``COURSE_GRADING=1``, in the notebook's folder) and says which of the watched heavy modules they imported,
and what importing ``WORKER_IMPORTS``'s tuple costs there, in a fresh process. Run from the repository root:

    .venv/bin/python benchmarks/worker_imports.py --out benchmarks/worker_imports
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from _common import command, load_average, machine, now

from autograder.notebooks import NOTEBOOKS, WORKER_IMPORTS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WATCHED = ("transformers.modeling_utils", "peft", "torch._dynamo", "torch._inductor", "sympy", "tokenizers")

# Run in a fresh Python: argv[1] the notebook, argv[2] its adapters' module, argv[3] the watched modules, argv[4]
# this folder (for ``_run_cells``, which runs the cells). Prints one JSON line.
PROBE = r"""
import json, os, sys
os.environ.update(COURSE_GRADING="1", MPLBACKEND="Agg")
from autograder import worker
worker.preload()
import importlib, matplotlib.pyplot
importlib.import_module(sys.argv[2])
sys.path.insert(0, sys.argv[4])
from _run_cells import run_code_cells
before = set(sys.modules)
failed = run_code_cells(sys.argv[1])
watched = json.loads(sys.argv[3])
print(json.dumps({"adapters": [m for m in watched if m in before],
                  "cells": [m for m in watched if m in sys.modules and m not in before], "failed_cells": failed}))
os._exit(0)
"""

# Seconds to import a WORKER_IMPORTS tuple after what every worker imports, in a fresh Python.
COST = r"""
import importlib, json, sys, time
from autograder import worker
worker.preload()
import matplotlib.pyplot
start = time.perf_counter()
for module in json.loads(sys.argv[1]):
    importlib.import_module(module)
print(json.dumps(time.perf_counter() - start))
"""


def _last_json(argv: list[str], cwd: Path = ROOT, env: dict | None = None):
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write OUT.md and OUT.json")
    args = parser.parse_args()
    env = dict(os.environ, COURSE_SHORT_RUNS="1", HF_HUB_OFFLINE="1")
    started, load_before = now(), load_average()
    rows = []
    for notebook in NOTEBOOKS:
        path = ROOT / "solutions" / notebook / f"{notebook}.ipynb"
        seen = _last_json(
            [sys.executable, "-c", PROBE, str(path), f"autograder.notebooks.nb{notebook}", json.dumps(WATCHED), str(HERE)],
            env=env,
        )
        declared = list(WORKER_IMPORTS.get(notebook, ()))
        rows.append({"notebook": notebook, "declared": declared, **seen})
        print(rows[-1], flush=True)
    costs = {
        ", ".join(imports): _last_json([sys.executable, "-c", COST, json.dumps(list(imports))])
        for imports in dict.fromkeys(WORKER_IMPORTS.values())
    }
    result = {"command": command(), "date": started, "machine": machine(), "rows": rows, "import_seconds": costs}
    lines = [
        "# What each notebook's graded run imports, against WORKER_IMPORTS",
        "",
        f"- command: `{result['command']}`",
        f"- date: {started}",
        f"- machine: {result['machine']}",
        f"- load average (1, 5, 15 min): before {load_before}, after {load_average()}",
        "- imported by the adapters: imported when the worker imports the notebook's adapters' module (before any "
        "cell); by the cells: imported by the solution's code cells (all but the test cells)",
        "",
        "| notebook | WORKER_IMPORTS | imported by the adapters | imported by the cells | cells that failed |",
        "|---|---|---|---|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['notebook']} | {', '.join(row['declared']) or '-'} | {', '.join(row['adapters']) or '-'} | "
            f"{', '.join(row['cells']) or '-'} | {row['failed_cells']} |"
        )
    lines += ["", "| WORKER_IMPORTS tuple | import seconds, after what every worker imports |", "|---|---:|"]
    lines += [f"| {imports} | {seconds:.2f} |" for imports, seconds in costs.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.with_suffix(".md").write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
