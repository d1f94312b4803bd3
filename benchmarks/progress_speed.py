"""How long `python -m autograder progress` makes a student wait: every notebook graded (as before the cache,
and as `--fresh` still does), nothing changed since (every result reused), one notebook changed.

    .venv/bin/python benchmarks/progress_speed.py [--course course] [--output benchmarks/progress_speed]

Runs on a scratch copy of the course folder with a scratch cache, so neither the course nor the user's cache is
touched. Writes OUTPUT.json and OUTPUT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import command, machine, now  # noqa: E402


def _run(course: Path, cache: Path, *extra: str) -> float:
    env = {**os.environ, "COURSE_PROGRESS_CACHE": str(cache)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autograder", "progress", str(course), *extra],
                          capture_output=True, text=True, env=env, timeout=1800)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--course", default=str(ROOT / "course"))
    parser.add_argument("--changed", default="02_normalization", help="the notebook edited for the third run")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "progress_speed"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        course, cache = Path(tmp) / "course", Path(tmp) / "cache"
        shutil.copytree(args.course, course)
        rows = {"every notebook graded (no cache, as before; --fresh)": _run(course, cache, "--fresh")}
        rows["nothing changed (every result reused)"] = _run(course, cache)
        path = course / args.changed / f"{args.changed}.ipynb"
        nb = nbformat.read(path, as_version=4)
        next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")).source += "\n# an edit\n"
        nbformat.write(nb, path)
        rows[f"one notebook changed ({args.changed})"] = _run(course, cache)
    report = {"command": command(), "date": now(), "machine": machine(), "load_average": os.getloadavg(),
              "seconds": rows}
    out = Path(args.output)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    lines = [f"# `autograder progress`: the wait\n\n{report['date']}; {report['machine']}; load average "
             f"{', '.join(f'{x:.1f}' for x in report['load_average'])} at the end\n\nCommand: `{report['command']}`\n",
             "| run | seconds |", "|---|---:|"] + [f"| {name} | {seconds:.1f} |" for name, seconds in rows.items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
