"""Where the seconds of ``python -m autograder check NOTEBOOK`` go, for every notebook, before and after a change.

For each code tree given (``--tree LABEL=PATH``, each with its own ``.venv``), each notebook set (``course/``:
the untouched release, stubs; ``solutions/``: everything passing), each of the 14 notebooks and each mode
(sandboxed, unsandboxed), runs ``benchmarks/_check_phases.py`` in a fresh process with that tree's Python,
which grades the notebook as ``check`` does and times its phases: the command line's imports, the worker's
start (bubblewrap, Python, torch and the adapters), the notebook's cells, the visible and the hidden checks,
closing the worker and deleting the scratch copy. ``total`` is the wall time of that whole process, from
start to exit, as a student waits for ``check``. Trees and modes are interleaved, ``--repeats`` rounds;
each number is a median over rounds, with the 1-minute load average taken at each run.

    .venv/bin/python benchmarks/check_latency.py --tree before=/path/to/worktree-of-main --tree after=. \\
        --repeats 3 --json benchmarks/check_latency.json
    .venv/bin/python benchmarks/check_latency.py --baseline --repeats 1 --load-json benchmarks/check_latency.json \\
        --json benchmarks/check_latency.json --write benchmarks/check_latency_tables.md

``--baseline`` also times each notebook's cells alone, without the grader (``_run_cells.py``), and compares the
unsandboxed ``check`` with it; ``--load-json`` adds the runs of an earlier call to the tables.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRIVER = Path(__file__).resolve().parent / "_check_phases.py"
BASELINE = Path(__file__).resolve().parent / "_run_cells.py"
PHASES = ["imports", "identify", "worker_start", "cells", "visible", "hidden", "close", "cleanup", "other", "total"]


def notebooks(tree: Path, kind: str) -> list[Path]:
    return sorted(p for p in (tree / kind).glob("*/*.ipynb") if p.stem == p.parent.name)


def run_cells_only(notebook: Path) -> dict:
    """The baseline: the notebook's cells in one fresh Python without any grader (``_run_cells.py``)."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(BASELINE), str(notebook)], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1")))
    if done.returncode != 0:
        sys.exit(f"{notebook} (cells only) failed:\n{done.stderr[-3000:]}")
    return {"total": time.perf_counter() - start, "load": load, **json.loads(done.stdout.strip().splitlines()[-1])}


def run_once(tree: Path, notebook: Path, sandboxed: bool) -> dict:
    # PYTHONPATH: the tree's own packages, even where its .venv is a link to another tree's (editable installs
    # point at the tree they were made in).
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONPATH=str(tree.resolve()))
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run([str(tree / ".venv/bin/python"), str(DRIVER), str(notebook), "1" if sandboxed else "0"],
                          cwd=tree, env=env, capture_output=True, text=True)
    total = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{notebook} (sandboxed={sandboxed}) failed:\n{done.stderr[-3000:]}")
    phases = json.loads(done.stdout.strip().splitlines()[-1])
    phases.setdefault("identify", 0.0)  # runs recorded before the driver timed it: it is in "other" there
    named = sum(phases[k] for k in ("identify", "worker_start", "cells", "visible", "hidden", "close", "cleanup"))
    # reading the notebook, copying the folder, waiting for the oracles' imports (after the change)
    phases["other"] = phases["grade"] - named
    phases["total"], phases["load"] = total, load
    return phases


def median_row(runs: list[dict]) -> dict:
    row = {key: statistics.median(run[key] for run in runs) for key in [*PHASES, "load"]}
    row["score"] = f"{runs[0]['score']}/{runs[0]['max_score']}"
    row["runs"] = len(runs)
    return row


def table(results: dict, labels: list[str], kind: str, sandboxed: bool) -> list[str]:
    """One Markdown table: per notebook, each tree's median phases (seconds)."""
    lines = [f"\n### {kind}/, {'sandboxed' if sandboxed else 'unsandboxed'}\n",
             "| notebook | tree | score | " + " | ".join(PHASES) + " | total − cells − checks | load 1-min |",
             "|---|---|---|" + "---:|" * (len(PHASES) + 2)]
    for name in sorted({key[2] for key in results if key[1] == kind}):
        for label in labels:
            row = results.get((label, kind, name, sandboxed))
            if row is None:
                continue
            overhead = row["total"] - row["cells"] - row["visible"] - row["hidden"]
            cells = " | ".join(f"{row[p]:.2f}" for p in PHASES)
            lines.append(f"| {name} | {label} | {row['score']} | {cells} | {overhead:.2f} | {row['load']:.1f} |")
    for label in labels:
        rows = [row for key, row in results.items() if key[0] == label and key[1] == kind and key[3] == sandboxed]
        if rows:
            medians = " | ".join(f"{statistics.median(r[p] for r in rows):.2f}" for p in PHASES)
            overhead = statistics.median(r["total"] - r["cells"] - r["visible"] - r["hidden"] for r in rows)
            load = statistics.median(r["load"] for r in rows)
            lines.append(f"| **median of {len(rows)}** | {label} | | {medians} | {overhead:.2f} | {load:.1f} |")
    return lines


def summary(results: dict, labels: list[str], kinds: list[str]) -> list[str]:
    """Per notebook set and mode: each tree's median over the notebooks of total, cells + checks, and the rest."""
    lines = ["\n### Summary: median over the 14 notebooks (seconds)\n",
             "| notebooks | mode | tree | total | cells + checks | total − cells − checks | slowest total | load 1-min |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for kind in kinds:
        for sandboxed in (True, False):
            for label in labels:
                rows = [r for k, r in results.items() if k[0] == label and k[1] == kind and k[3] == sandboxed]
                if not rows:
                    continue
                work = [r["cells"] + r["visible"] + r["hidden"] for r in rows]
                cells = [
                    f"{statistics.median(r['total'] for r in rows):.2f}", f"{statistics.median(work):.2f}",
                    f"{statistics.median(r['total'] - w for r, w in zip(rows, work, strict=True)):.2f}",
                    f"{max(r['total'] for r in rows):.2f}", f"{statistics.median(r['load'] for r in rows):.1f}",
                ]
                mode = "sandboxed" if sandboxed else "unsandboxed"
                lines.append(f"| {kind}/ | {mode} | {label} | " + " | ".join(cells) + " |")
    return lines


def versus_cells(results: dict, labels: list[str], kinds: list[str], baseline: dict) -> list[str]:
    """Unsandboxed ``check`` against running the notebook's cells alone: what grading adds besides the checks."""
    if not baseline:
        return []
    lines = ["\n### Unsandboxed check against the cells alone (seconds; medians over the notebooks)\n",
             "`cells alone`: `_run_cells.py`, the notebook's code cells in one fresh Python (its imports included), "
             "no grader. `added`: check's total − its checks (visible + hidden) − cells alone.\n",
             "| notebooks | tree | cells alone | check total | added | largest added |", "|---|---|---:|---:|---:|---:|"]
    for kind in kinds:
        for label in labels:
            pairs = [(statistics.median(baseline[kind, k[2]]), r) for k, r in results.items()
                     if k[0] == label and k[1] == kind and k[3] is False and (kind, k[2]) in baseline]
            if not pairs:
                continue
            added = [r["total"] - r["visible"] - r["hidden"] - alone for alone, r in pairs]
            lines.append(f"| {kind}/ | {label} | {statistics.median(a for a, _ in pairs):.2f} | "
                         f"{statistics.median(r['total'] for _, r in pairs):.2f} | {statistics.median(added):.2f} | "
                         f"{max(added):.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                        help="a code tree with its own .venv, e.g. before=../main-worktree (repeatable)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kinds", default="course,solutions", help="notebook sets (default %(default)s)")
    parser.add_argument("--only", help="comma-separated notebook stems to time (default: all)")
    parser.add_argument("--baseline", action="store_true",
                        help="also time each notebook's cells alone, in a fresh Python without the grader")
    parser.add_argument("--json", type=Path, help="write every run here")
    parser.add_argument("--load-json", type=Path, action="append", default=[],
                        help="also tabulate runs from an earlier --json (e.g. a 'before' run)")
    parser.add_argument("--write", type=Path, help="write the Markdown tables here")
    args = parser.parse_args()
    trees = {label: Path(path).resolve() for label, path in (t.split("=", 1) for t in args.tree)}
    kinds = args.kinds.split(",")
    only = set(args.only.split(",")) if args.only else None
    header = [
        f"- command: `{shlex.join(['.venv/bin/python', *sys.argv])}`",
        f"- date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}",
        f"- machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}, "
        f"running as {'root' if os.geteuid() == 0 else 'a user'}; OMP_NUM_THREADS=1",
        f"- load average at start (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
    ]
    print("\n".join(header), file=sys.stderr)
    runs: list[dict] = []
    for data in args.load_json:
        runs += json.loads(data.read_text())["runs"]
    for repeat in range(args.repeats):
        for kind in kinds:
            for notebook in notebooks(ROOT, kind):
                if only and notebook.stem not in only:
                    continue
                if args.baseline:
                    run = run_cells_only(notebook)
                    run.update(label="cells only", kind=kind, notebook=notebook.stem, sandboxed=None, repeat=repeat)
                    runs.append(run)
                    print(f"{repeat} cells only {kind} {notebook.stem}: {run['total']:.2f} s", file=sys.stderr)
                order = [(label, sandboxed) for label in trees for sandboxed in (True, False)]
                for label, sandboxed in order if repeat % 2 == 0 else order[::-1]:
                    path = trees[label] / kind / notebook.parent.name / notebook.name
                    run = run_once(trees[label], path, sandboxed)
                    run.update(label=label, kind=kind, notebook=notebook.stem, sandboxed=sandboxed, repeat=repeat)
                    runs.append(run)
                    print(f"{repeat} {label} {kind} {notebook.stem} sandboxed={sandboxed}: {run['total']:.2f} s "
                          f"(load {run['load']:.1f})", file=sys.stderr)
                    if args.json:
                        args.json.write_text(json.dumps({"header": header, "runs": runs}, indent=1))
    header.append(f"- load average at end (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    baseline: dict[tuple, list[float]] = {}
    for run in runs:
        if run["label"] == "cells only":
            baseline.setdefault((run["kind"], run["notebook"]), []).append(run["total"])
    grouped: dict[tuple, list[dict]] = {}
    for run in (r for r in runs if r["label"] != "cells only"):
        grouped.setdefault((run["label"], run["kind"], run["notebook"], run["sandboxed"]), []).append(run)
    results = {key: median_row(group) for key, group in grouped.items()}
    labels = list(dict.fromkeys(run["label"] for run in runs))
    labels = [label for label in labels if label != "cells only"]
    lines = [*header, *summary(results, labels, kinds), *versus_cells(results, labels, kinds, baseline)]
    for kind in kinds:
        for sandboxed in (True, False):
            lines += table(results, labels, kind, sandboxed)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"header": header, "runs": runs}, indent=1))
    if args.write:
        args.write.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
