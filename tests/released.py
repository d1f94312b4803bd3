"""Course folders with a notebook released, from one nbgrader generation of every notebook per test process.

``nbgrader generate_assignment`` costs an nbgrader start-up (about 5 s) per call, and the suite sets up some
thirty course folders. ``generate_assignment "*"`` releases every notebook in one process (12 s for the
fourteen of 2026-11-28); each course folder then gets copies of the release, the source and a gradebook that knows only its
own assignment, which is what a ``generate_assignment NOTEBOOK`` in that folder leaves.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from notebooks import ROOT


def nbgrader_environment() -> dict:
    """The environment in which nbgrader finds the venv's tools (it runs ``alembic`` and ``jupyter`` by name)."""
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


@dataclass(frozen=True)
class Generation:
    folder: Path  # a course directory: nbgrader_config.py, solutions/, course/ and gradebook.db of every notebook
    log: str  # what nbgrader said while generating


@functools.cache
def every_notebook_released() -> Generation:
    """``nbgrader generate_assignment "*"`` on a copy of solutions/, once per suite run: under pytest-xdist the
    first worker to need it generates it, under a file lock, into a folder named by the run's id, and the other
    workers read that folder (a generation takes 13 s of CPU on the idle 2-core machine). Every user only reads it."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return _generate(Path(tempfile.mkdtemp(prefix="released-")))
    from filelock import FileLock

    shared = Path(tempfile.gettempdir()) / f"released-{run}"
    with FileLock(f"{shared}.lock"):
        if not (shared / "said.txt").is_file():
            generation = _generate(Path(tempfile.mkdtemp(prefix="released-")))
            (generation.folder / "said.txt").write_text(generation.log)
            generation.folder.rename(shared)  # whole or not at all: a worker that failed midway leaves nothing
        return Generation(shared, (shared / "said.txt").read_text())


def _generate(folder: Path) -> Generation:
    shutil.copytree(ROOT / "solutions", folder / "solutions")
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    done = subprocess.run(
        [Path(sys.executable).parent / "nbgrader", "generate_assignment", "*", "--log-level=WARN"],
        cwd=folder,
        env=nbgrader_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return Generation(folder, done.stdout + done.stderr)


def release_into(course: Path, *notebooks: str) -> str:
    """Make ``course`` (created if missing, readable by all: grading as root runs student code as another user) a
    course directory where ``notebooks`` are released, as ``nbgrader generate_assignment NOTEBOOK`` for each leaves
    it. Returns what nbgrader said while generating."""
    from nbgrader.api import Gradebook

    generated = every_notebook_released()
    course.mkdir(parents=True, exist_ok=True)
    course.chmod(0o755)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for notebook in notebooks:
        for part in ("solutions", "course"):
            shutil.copytree(generated.folder / part / notebook, course / part / notebook)
    shutil.copy(generated.folder / "gradebook.db", course / "gradebook.db")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for assignment in [a.name for a in gradebook.assignments if a.name not in notebooks]:
            gradebook.remove_assignment(assignment)
    return generated.log
