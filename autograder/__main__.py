"""Command line: ``python -m autograder check NOTEBOOK.ipynb [--json]``.

Runs the notebook's code in a separate process and every check (visible and hidden)
in this one; prints per-exercise results and exits 1 if anything failed.
"""

from __future__ import annotations

import argparse
import json
import sys

from autograder.grading import DEFAULT_TIMEOUT, grade_file


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="grade one notebook")
    check.add_argument("notebook", help="path to a course notebook (.ipynb)")
    check.add_argument("--json", action="store_true", help="print a JSON report")
    check.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                       help="seconds allowed per cell and per call into your code (default %(default)s)")
    args = parser.parse_args(argv)

    report = grade_file(args.notebook, timeout=args.timeout)
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
