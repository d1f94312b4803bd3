"""Command line: ``python -m autograder check NOTEBOOK.ipynb [--json]``.

Runs the notebook's code in a separate, sandboxed process and every check (visible and
hidden) in this one; prints per-exercise results and exits 1 if anything failed, 2 if
the file is not one of the course's notebooks.
"""

from __future__ import annotations

import argparse
import json
import sys

import nbformat

from autograder.grading import DEFAULT_TIMEOUT, grade_file
from autograder.sandbox import (
    DEFAULT_FILE_SIZE,
    DEFAULT_MEMORY,
    DEFAULT_PROCESSES,
    Limits,
    SandboxUnavailable,
    unavailable_reason,
)


def _grade(path: str, **options):
    """Grade in the sandbox where there is one; elsewhere (macOS, Binder, a container) say so once, grade anyway."""
    reason = unavailable_reason()
    if reason is None:
        try:
            return grade_file(path, sandboxed=True, **options)
        except SandboxUnavailable as error:
            reason = str(error)
    print(f"note: checking without a sandbox: {reason}. Your code runs with your own permissions; "
          "the memory and file-size limits still apply.", file=sys.stderr)
    return grade_file(path, sandboxed=False, **options)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="grade one notebook")
    check.add_argument("notebook", help="path to a course notebook (.ipynb), under any file name")
    check.add_argument("--json", action="store_true", help="print a JSON report")
    check.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                       help="seconds allowed per cell and per call into your code (default %(default)s)")
    check.add_argument("--memory", default=DEFAULT_MEMORY, help="memory your code may use, e.g. 3G or 512M (default %(default)s)")
    check.add_argument("--max-processes", type=int, default=DEFAULT_PROCESSES,
                       help="processes and threads your code may run at once (default %(default)s)")
    check.add_argument("--max-file-size", default=DEFAULT_FILE_SIZE, help="largest file your code may write (default %(default)s)")
    args = parser.parse_args(argv)

    try:
        limits = Limits.from_settings(args.memory, args.max_processes, args.max_file_size)
    except ValueError as error:
        parser.error(str(error))
    try:
        report = _grade(args.notebook, timeout=args.timeout, limits=limits)
    except (OSError, ValueError, nbformat.reader.NotJSONError) as error:
        print(f"{args.notebook}: cannot read it as a notebook ({error})", file=sys.stderr)
        return 2
    except LookupError as error:
        print(f"{args.notebook}: not one of this course's notebooks ({error})", file=sys.stderr)
        return 2
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


if __name__ == "__main__":
    sys.exit(main())
