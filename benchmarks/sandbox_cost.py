"""What the bubblewrap sandbox costs: wall seconds per graded notebook, with and without it.

Grades every solution notebook with ``grade_file(path, sandboxed=True)`` and ``sandboxed=False``,
``--repeats`` times each, alternating which mode goes first, after one untimed warm-up grading per
notebook; every grading must score full marks. Prints a Markdown table of the median (and min) seconds
per notebook and mode and their difference. ``--record`` also times ``record=True`` (as nbgrader's
autograde grades). A bare sandbox start (``true`` under the sandbox's bwrap command line) is timed too.

Run from the repository root (takes a few minutes):

    .venv/bin/python benchmarks/sandbox_cost.py --repeats 3 --write benchmarks/sandbox_cost.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from autograder.grading import grade_file
from autograder.sandbox import Sandbox, unavailable_reason

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in ROOT.glob("solutions/*/*.ipynb") if p.stem == p.parent.name)


def timed_grade(path: Path, sandboxed: bool, record: bool) -> float:
    start = time.perf_counter()
    report = grade_file(path, sandboxed=sandboxed, record=record)
    seconds = time.perf_counter() - start
    if report.score != report.max_score:
        sys.exit(f"{path.name}, sandboxed={sandboxed}, record={record}: {report.score}/{report.max_score}")
    return seconds


def timed_run(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - start


def bare_start(repeats: int) -> tuple[float, float]:
    """Median seconds to run ``true`` under the sandbox's bwrap command line, and without it."""
    with Sandbox(NOTEBOOKS[0].parent, ROOT) as sandbox:
        argv = sandbox.wrap(["true"])
        on = statistics.median(timed_run(argv) for _ in range(repeats))
        return on, statistics.median(timed_run(["true"]) for _ in range(repeats))


def summary(seconds: list[float]) -> tuple[float, float]:
    return statistics.median(seconds), min(seconds)


def row(name: str, record: bool, on: tuple[float, float], off: tuple[float, float]) -> str:
    """A table row from the (median, min) seconds with and without the sandbox."""
    diff = on[0] - off[0]
    both = f"{on[0]:.2f} ({on[1]:.2f}) | {off[0]:.2f} ({off[1]:.2f})"
    return f"| {name} | {record} | {both} | {diff:+.2f} | {100 * diff / off[0]:+.1f}% |"


def table(times: dict, records: list[bool]) -> str:
    lines = [
        "| notebook | record | sandboxed s, median (min) | unsandboxed s, median (min) | difference s | % |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for record in records:
        totals = [0.0] * 4  # sums of the medians and mins with the sandbox, then without
        for path in NOTEBOOKS:
            on, off = (summary(times[path.stem, record, sandboxed]) for sandboxed in (True, False))
            lines.append(row(path.stem, record, on, off))
            totals = [total + x for total, x in zip(totals, (*on, *off), strict=True)]
        lines.append(row("**total**", record, (totals[0], totals[1]), (totals[2], totals[3])))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="gradings per notebook and mode (default 3)")
    parser.add_argument("--record", action="store_true", help="also time record=True (nbgrader autograde)")
    parser.add_argument("--write", metavar="FILE.md", type=Path, help="also write the results to this file")
    parser.add_argument("--note", default="", help="a line for the Markdown file, e.g. about the machine")
    args = parser.parse_args()
    if (reason := unavailable_reason()) is not None:
        sys.exit(f"the sandbox cannot run here: {reason}")

    records = [False, True] if args.record else [False]
    load_before = os.getloadavg()
    times: dict[tuple[str, bool, bool], list[float]] = {}
    for path in NOTEBOOKS:
        timed_grade(path, sandboxed=False, record=False)  # warm-up: the grader's own imports, disk caches
        for record in records:
            for repeat in range(args.repeats):
                for sandboxed in (True, False) if repeat % 2 == 0 else (False, True):
                    seconds = timed_grade(path, sandboxed, record)
                    times.setdefault((path.stem, record, sandboxed), []).append(seconds)
            print(f"{path.stem} record={record}: done", file=sys.stderr)
    start_on, start_off = bare_start(max(10, 5 * args.repeats))
    load_after = os.getloadavg()

    result = table(times, records)
    bare = f"`true` under the sandbox's bwrap command line {1000 * start_on:.1f} ms, without {1000 * start_off:.1f} ms"
    print(f"{result}\n\nBare start (medians): {bare}")
    if args.write is None:
        return
    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else sys.executable
    bwrap = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    machine = f"{os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}"
    machine += f", torch {torch.__version__}, {bwrap}"
    loads = [" ".join(f"{x:.2f}" for x in load) for load in (load_before, load_after)]
    lines = [
        "# Sandbox cost: seconds per graded notebook\n",
        f"- command: `{shlex.join([python, *sys.argv])}`",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- machine: {machine}",
        f"- running as root: {'yes' if os.geteuid() == 0 else 'no'}",
        f"- load average (1, 5, 15 min): before {loads[0]}, after {loads[1]}",
        *([f"- note: {args.note}"] if args.note else []),
        f"\nEach notebook graded {args.repeats} times per mode with `grade_file`, modes interleaved, after one"
        " untimed warm-up grading; every grading scored full marks. Wall seconds (`time.perf_counter`).\n",
        result,
        f"\nBare sandbox start (medians): {bare}.",
    ]
    args.write.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.write}", file=sys.stderr)


if __name__ == "__main__":
    main()
