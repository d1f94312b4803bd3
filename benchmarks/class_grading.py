"""Grading a class: plain ``nbgrader autograde`` against ``python -m autograder grade-class`` with 1 and 2 workers.

A scratch course holds ``--students`` simulated submissions of notebook 02 (normalization): two independent
exercises, so "partly right" is natural (one right, one a plausible mistake from ``tests/wrong``), and a
grading time typical of notebooks 01-05 (benchmarks/sandbox_cost.md). The mix, by student number: 2 in 5
right, 2 in 5 partly right, 1 in 5 the untouched release. Each measurement starts from a fresh copy of
the course, and every gradebook must hold exactly the expected scores. Timed (wall seconds):

- one submission by ``nbgrader autograde ASSIGNMENT --student ID`` in a fresh process (start-up included);
- the whole class by plain ``nbgrader autograde ASSIGNMENT`` (one process, one submission after another);
- the whole class by ``grade-class --workers 1`` and ``--workers 2`` (CSV export included).

Run from the repository root on a quiet machine (100 students: about 30 minutes on 2 cores):

    .venv/bin/python benchmarks/class_grading.py --students 100 --out benchmarks/class_grading
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import command, load_average, machine, now

from autograder.zygote import COLD_ENV

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
NOTEBOOK = "02_normalization"


def students(count: int) -> dict:
    """Name -> Student (tests/test_nbgrader_e2e.py): right, partly right (each exercise's mistakes in turn), stub."""
    from test_nbgrader_e2e import Student, points, wrong
    from wrong import wrong_versions

    exercises = list(points(NOTEBOOK))
    every = wrong_versions(NOTEBOOK)
    # each mistake as (exercise, its index among that exercise's mistakes)
    mistakes = [(w.exercise, sum(v.exercise == w.exercise for v in every[:k])) for k, w in enumerate(every)]
    made = {}
    for i in range(count):
        kind = ("right", "right", "partly", "partly", "stub")[i % 5]
        if kind == "right":
            made[f"s{i:03d}"] = Student({}, set())
        elif kind == "partly":
            exercise, which = mistakes[(i // 5 * 2 + i % 5 - 2) % len(mistakes)]
            made[f"s{i:03d}"] = Student({exercise: wrong(NOTEBOOK, exercise, which)}, {exercise})
        else:
            made[f"s{i:03d}"] = Student(None, set(exercises))
    return made


def make_course(folder: Path, class_: dict) -> None:
    import nbformat
    from notebooks import read
    from test_nbgrader_e2e import nbgrader, submission

    folder.mkdir(mode=0o755)
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    shutil.copytree(ROOT / "solutions" / NOTEBOOK, folder / "solutions" / NOTEBOOK)
    done = nbgrader(folder, "generate_assignment", NOTEBOOK)
    assert done.returncode == 0, done.stderr
    release = read(folder / "course" / NOTEBOOK / f"{NOTEBOOK}.ipynb")
    for name, student in class_.items():
        (folder / "submitted" / name / NOTEBOOK).mkdir(parents=True)
        nbformat.write(submission(release, NOTEBOOK, student), folder / "submitted" / name / NOTEBOOK / f"{NOTEBOOK}.ipynb")


def check_gradebook(folder: Path, class_: dict, graded: list[str]) -> None:
    from nbgrader.api import Gradebook
    from test_nbgrader_e2e import points

    with Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gradebook:
        for name in graded:
            found = gradebook.find_submission_notebook(NOTEBOOK, NOTEBOOK, name)
            scores = {g.name.removesuffix("_test"): g.score for g in found.grades}
            expected = {e: p * (e not in class_[name].zero) for e, p in points(NOTEBOOK).items()}
            if scores != expected:
                sys.exit(f"{name}: the gradebook says {scores}, expected {expected}")


def timed(argv: list[str], cwd: Path, cold: bool = False) -> tuple[float, str]:
    """Wall seconds and stdout of ``argv``; ``cold``: every sandboxed worker a fresh Python (no zygote)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop(COLD_ENV, None)
    if cold:
        env[COLD_ENV] = "1"
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="grade-class runs (default 1 2)")
    parser.add_argument("--no-plain-class", action="store_true", help="skip plain nbgrader autograde of the class")
    parser.add_argument("--cold-too", action="store_true",
                        help="also run each grade-class with every worker started cold (AUTOGRADER_COLD_WORKERS=1)")
    parser.add_argument("--out", help="write OUT.json and OUT.md")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    nbgrader = str(Path(sys.executable).parent / "nbgrader")
    class_ = students(args.students)
    load_before = load_average()
    results: dict = {"students": args.students, "notebook": NOTEBOOK,
                     "mix": {"right": sum(not s.zero for s in class_.values()),
                             "partly right": sum(bool(s.answers) for s in class_.values()),
                             "stub": sum(s.answers is None for s in class_.values())}}
    with tempfile.TemporaryDirectory(prefix="class-grading-") as scratch:
        Path(scratch).chmod(0o755)  # grading as root runs student code as another user, who must read the course
        template = Path(scratch) / "template"
        make_course(template, class_)

        def fresh(name: str) -> Path:
            folder = Path(scratch) / name
            shutil.copytree(template, folder, symlinks=True)
            return folder

        first = next(iter(class_))
        folder = fresh("one")
        seconds, _ = timed([nbgrader, "autograde", NOTEBOOK, "--student", first, "--log-level=WARN"], folder)
        check_gradebook(folder, class_, [first])
        results["plain_one_submission_s"] = round(seconds, 2)
        print(f"plain nbgrader autograde, one submission: {seconds:.1f} s", file=sys.stderr)
        if not args.no_plain_class:
            folder = fresh("plain")
            seconds, _ = timed([nbgrader, "autograde", NOTEBOOK, "--log-level=WARN"], folder)
            check_gradebook(folder, class_, list(class_))
            results["plain_class_s"] = round(seconds, 2)
            print(f"plain nbgrader autograde, whole class: {seconds:.1f} s", file=sys.stderr)
        starts = ["warm", "cold"] if args.cold_too else ["warm"]
        for workers in args.workers:
            for start in starts:  # alternated per worker count, so a drift in the machine's speed hits both
                folder = fresh(f"workers{workers}{start}")
                seconds, out = timed([sys.executable, "-m", "autograder", "grade-class", NOTEBOOK,
                                      "--workers", str(workers)], folder, cold=start == "cold")
                check_gradebook(folder, class_, list(class_))
                retries = int(re.search(r"(\d+) retries", out)[1])
                key = f"grade_class_{workers}_workers" + ("_cold" if start == "cold" else "")
                results[key] = {"s": round(seconds, 2), "lock_retries": retries}
                print(f"grade-class --workers {workers} ({start} workers): {seconds:.1f} s, {retries} retries",
                      file=sys.stderr)
    results |= {"machine": machine(), "command": command(), "date": now(),
                "load_average": {"before": load_before, "after": load_average()}}
    print(json.dumps(results, indent=2))
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps(results, indent=2) + "\n")
        Path(f"{args.out}.md").write_text(markdown(results))


def markdown(r: dict) -> str:
    n = r["students"]
    rows = [("plain `nbgrader autograde --student` (one submission, fresh process)", r["plain_one_submission_s"], 1)]
    if "plain_class_s" in r:
        rows.append(("plain `nbgrader autograde` (whole class, one process)", r["plain_class_s"], n))
    for key, value in r.items():
        if key.startswith("grade_class_"):
            workers = key.split("_")[2]
            start = "every worker started cold" if key.endswith("_cold") else "workers forked from the zygote"
            rows.append((f"`grade-class --workers {workers}`, {start} ({value['lock_retries']} retries on a locked "
                         "gradebook)", value["s"], n))
    lines = [
        "# Class grading: plain nbgrader autograde and grade-class\n",
        f"- command: `{r['command']}`",
        f"- date: {r['date']}",
        f"- machine: {r['machine']}",
        f"- load average (1, 5, 15 min): before {r['load_average']['before']}, after {r['load_average']['after']}",
        f"- class: {n} simulated submissions of {r['notebook']}: {r['mix']['right']} right, "
        f"{r['mix']['partly right']} partly right, {r['mix']['stub']} untouched; every gradebook checked",
        "",
        "| run | submissions | wall s | s per submission |",
        "|---|---:|---:|---:|",
        *(f"| {name} | {count} | {seconds:.1f} | {seconds / count:.2f} |" for name, seconds, count in rows),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
