"""Command line: ``python -m autograder check NOTEBOOK [--json]``, ``progress``, ``doctor``, ``grade-class``,
``report``.

``check`` finds the notebook (a path, or a name: ``autograder.notebook_path``), runs its code in a separate,
sandboxed process and every check (visible and hidden) in this one; says on stderr what it is doing as it goes (starting Python, running cells i/N, checks j/M:
``autograder.phases``), prints per-exercise results and exits 1 if anything failed, 2 if
the file is not one of the course's notebooks or the grader itself could not run. ``progress`` does the same for every notebook of
the course folder (``autograder.progress``); ``grade-class`` autogrades a class with nbgrader,
several submissions at once (``autograder.class_grading``); ``doctor`` checks, one line per item, that
this machine can grade (``autograder.doctor``); ``report`` writes an HTML page on how a
graded class did: pass rates, the mistakes made most, the scores, who could not be graded
(``autograder.class_report``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# Light imports only: torch and nbformat cost seconds, and `progress` with every result cached needs neither.
from autograder.sandbox import DEFAULT_FILE_SIZE, DEFAULT_MEMORY, DEFAULT_PROCESSES, DEFAULT_TIMEOUT, Limits


def _limit_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds allowed per cell and per call into your code (default %(default)s)",
    )
    command.add_argument(
        "--memory", default=DEFAULT_MEMORY, help="memory your code may use, e.g. 3G or 512M (default %(default)s)"
    )
    command.add_argument(
        "--max-processes",
        type=int,
        default=DEFAULT_PROCESSES,
        help="processes and threads your code may run at once (default %(default)s)",
    )
    command.add_argument(
        "--max-file-size", default=DEFAULT_FILE_SIZE, help="largest file your code may write (default %(default)s)"
    )


def _workers(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a number of workers: {text!r} (write 1 or more)")
    return int(text)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (write 1 or more)")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="grade one notebook")
    check.add_argument(
        "notebook",
        help="the notebook's name (e.g. 02_normalization: your copy is looked for in this folder, its course/ and "
        "your home, as autograder.notebook_path says), or its path, under any file name",
    )
    check.add_argument("--json", action="store_true", help="print a JSON report")
    _limit_options(check)
    progress = commands.add_parser("progress", help="grade every notebook of the course folder, in a table")
    progress.add_argument("course", nargs="?", help="the course folder (default: course/ of this repository)")
    progress.add_argument(
        "--workers", type=_workers, help="notebooks graded at once (default: half the cores, as memory allows)"
    )
    progress.add_argument("--json", action="store_true", help="print a JSON report")
    progress.add_argument(
        "--fresh", action="store_true", help="grade every notebook again, ignoring the results kept from earlier runs"
    )
    _limit_options(progress)
    classes = commands.add_parser("grade-class", help="nbgrader autograde, several submissions at once")
    classes.add_argument("assignment", help="the assignment (notebook) to autograde, e.g. 02_normalization")
    classes.add_argument(
        "--workers", type=_workers, help="submissions graded at once (default: every core, as memory allows)"
    )
    classes.add_argument("--csv", default="grades.csv", help="where to export the grades (default %(default)s)")
    classes.add_argument("--force", action="store_true", help="regrade submissions already autograded")
    commands.add_parser("doctor", help="check this machine can grade: sandbox, worker, data, versions, exchange")
    report = commands.add_parser("report", help="a graded class on one HTML page: pass rates, mistakes, scores")
    report.add_argument("assignment", help="the autograded assignment, e.g. 02_normalization")
    report.add_argument("--output", help="the HTML file to write (default: reports/ASSIGNMENT.html in the course root)")
    report.add_argument("--top", type=_count, default=10, help="mistakes to list (default %(default)s)")
    return parser


def main(argv=None) -> int:
    parser = _parser()
    args, nbgrader_options = parser.parse_known_args(argv)
    if args.command == "grade-class":
        from autograder.class_grading import main as grade_class

        return grade_class(args.assignment, args.workers, args.csv, args.force, nbgrader_options)
    if args.command == "doctor":
        from autograder.doctor import main as doctor

        return doctor(nbgrader_options)
    if args.command == "report":
        from autograder.class_report import main as class_report

        return class_report(args.assignment, args.output, args.top, nbgrader_options)
    if nbgrader_options:
        parser.error(f"unrecognized arguments: {' '.join(nbgrader_options)}")

    try:
        limits = Limits.from_settings(args.memory, args.max_processes, args.max_file_size)
    except ValueError as error:
        parser.error(str(error))
    if args.command == "progress":
        return _progress(args, limits)
    return _check(args, limits)


def _check(args, limits: Limits) -> int:
    """``check NOTEBOOK``: grade one notebook as nbgrader would, and say how it went."""
    from autograder.errors import GradingError
    from autograder.grading import self_check, unsandboxed_note
    from autograder.notebook_format import nbformat
    from autograder.notebook_path import NotebookNotFound, locate
    from autograder.phases import Display

    try:
        path, by_name = locate(args.notebook)
    except NotebookNotFound as error:
        print(f"{args.notebook}: {error}", file=sys.stderr)
        return 2
    if by_name:  # say which copy is graded: the student may hold more than one
        print(f"checking {path}", file=sys.stderr)
    display = Display(sys.stderr)  # what it is doing as it goes: a bar on a terminal, else a line per step
    try:
        try:
            report, unsandboxed = self_check(path, timeout=args.timeout, limits=limits, on_phase=display)
        finally:
            display.close()  # the bar leaves the terminal before anything else is said
    except (OSError, ValueError, nbformat.reader.NotJSONError) as error:
        print(f"{args.notebook}: cannot read it as a notebook ({error})", file=sys.stderr)
        return 2
    except LookupError as error:
        print(f"{args.notebook}: not one of this course's notebooks ({error})", file=sys.stderr)
        return 2
    except GradingError as error:
        print(f"{args.notebook}: {error}", file=sys.stderr)
        return 2
    if unsandboxed:
        print(unsandboxed_note(unsandboxed), file=sys.stderr)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        for result in report.exercises:
            mark = "PASS" if result.passed else "FAIL"
            print(f"[{mark}] {result.exercise.title} ({result.points}/{result.exercise.points})")
            if not result.passed:
                print("       " + result.message.replace("\n", "\n       "))
        print(f"Score: {report.score}/{report.max_score}")
    return 0 if report.passed else 1


def _progress(args, limits: Limits) -> int:
    """The table (or JSON) of every notebook; exit 0 however far the student is, 2 without a course folder or
    when the grader itself could not grade a notebook (one line per reason)."""
    from pathlib import Path

    from autograder.progress import progress, row_line, unsandboxed_note

    def said(row, done: int, total: int) -> None:  # a line per notebook as it is graded: grading all takes minutes
        print(row_line(row, done, total), file=sys.stderr, flush=True)

    try:
        result = progress(
            Path(args.course) if args.course else None,
            args.workers,
            args.timeout,
            limits,
            fresh=args.fresh,
            on_row=said,
        )
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for reason in sorted({row.unsandboxed for row in result.rows if row.unsandboxed}):
        print(unsandboxed_note(reason), file=sys.stderr)
    print(json.dumps(result.to_json(), indent=2, ensure_ascii=False) if args.json else result.table())
    failures = result.grader_failures()  # not the student's: the grader could not run
    for reason in failures:
        print(f"error: {reason}", file=sys.stderr)
    return 2 if failures else 0


def _exit_now(code: int) -> None:
    """End ``check`` without the interpreter's teardown: torch's finalizers alone take 0.4 s, and nothing is left
    to write once the report is printed (skipped under coverage, whose data is saved at exit)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if "coverage" not in sys.modules:
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    status = main()
    if sys.argv[1:2] == ["check"]:
        _exit_now(status)
    sys.exit(status)
