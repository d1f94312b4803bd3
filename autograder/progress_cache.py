"""The results ``progress`` keeps between runs, so that it regrades only the notebooks that changed.

An entry is one notebook's row of the table, filed under a key: the SHA-256 of everything its grade depends
on, namely

- the code the grader runs from the notebook: every code cell but the test cells, in order (its answers, and
  the demos, which run too), read as plain JSON (a cache hit needs neither torch nor nbformat's validation);
- every other file in the notebook's folder and below it (``beside``): a helper ``.py`` the cells import, a
  file they read. The grader shows student code that folder (as its working directory, on ``sys.path``);
  only checkpoints and bytecode are left out;
- the course's grading code: every file of the ``autograder`` and ``coursetools`` packages, and the versions
  of Python and torch;
- the options that can change a grade: the time limit and the resource limits.

Grading never depends on another notebook (the checks hand a notebook the course's own versions of earlier
parts), so one changed notebook costs one grading.

The cache is the student's own convenience and no grade is read from it: nbgrader's grading never reads it,
and ``progress --fresh`` ignores it. So its entries are not signed. A signature would protect nothing:
the student can read any key kept in their own account, and so can their code in an unsandboxed self-check
(no bubblewrap: macOS, Binder), which runs with the student's permissions and could write any entry;
sandboxed, student code can neither read nor write the folder. What a forged entry can change is what
``progress`` shows that student. An entry that does not parse, or whose key or path is not the one
wanted (an edited notebook, another version of the grader, a half-written file), is ignored, graded again
and overwritten. The folder is ``$COURSE_PROGRESS_CACHE`` if set, else ``transformer-course/progress`` in
the user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``): never in ``course/``, and hidden from
student code while it is graded (the sandbox hides the user's home and is told of this folder too).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict
from functools import cache
from importlib import metadata
from pathlib import Path

from coursetools.notebook_vocabulary import CHECKPOINTS, is_test_cell, source_text

VERSION = 2  # of the entry format (1: signed entries, which are now ignored)
SKIPPED = {CHECKPOINTS, "__pycache__"}  # in the notebook's folder: not what its code can import or read


def folder() -> Path:
    if os.environ.get("COURSE_PROGRESS_CACHE"):
        return Path(os.environ["COURSE_PROGRESS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "transformer-course" / "progress"


@cache
def grading_code() -> str:
    """The hash of the grading code: both packages' files, Python's and torch's versions."""
    import autograder
    import coursetools

    digest = hashlib.sha256(f"{VERSION}|{sys.version}|{metadata.version('torch')}".encode())
    for package in (autograder, coursetools):
        root = Path(package.__file__).parent
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def graded_code(path: Path) -> str | None:
    """The hash of the cells the grader runs from the notebook at ``path`` (``grading.student_cells``, read as
    plain JSON); None when it is not readable JSON."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        sources = []
        for cell in cells:
            if cell.get("cell_type") != "code":
                continue
            if is_test_cell(cell):  # grading never runs the student's copy of a test cell
                continue
            sources.append(source_text(cell.get("source", "")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return hashlib.sha256(json.dumps(sources).encode()).hexdigest()


def beside(path: Path) -> str:
    """The hash of every file in the notebook's folder and below (names and contents), the notebook excepted."""
    folder = path.parent
    digest = hashlib.sha256()
    for file in sorted(folder.rglob("*")):
        relative = file.relative_to(folder)
        if file == path or SKIPPED & set(relative.parts) or not file.is_file():
            continue
        try:
            content = file.read_bytes()
        except OSError as error:  # unreadable to the student too: its error is what the key holds
            content = f"unreadable: {error.strerror}".encode()
        digest.update(str(relative).encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()


def key(path: Path, course: Path, options: dict) -> str | None:
    code = graded_code(path)
    if code is None:
        return None
    where = str(path.relative_to(course))
    text = json.dumps(
        {"path": where, "code": code, "beside": beside(path), "grading": grading_code(), "options": options},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


class Cache:
    """Rows, one file per notebook path of one course folder."""

    def __init__(self, course: Path, root: Path | None = None):
        self.root = (root or folder()) / hashlib.sha256(str(course.resolve()).encode()).hexdigest()[:16]

    def _entry(self, relative: str) -> Path:
        return self.root / (hashlib.sha256(relative.encode()).hexdigest()[:24] + ".json")

    def get(self, relative: str, wanted: str) -> dict | None:
        """The row stored for ``relative`` under the key ``wanted``; None if there is none or it does not parse."""
        try:
            stored = json.loads(self._entry(relative).read_text(encoding="utf-8"))
            if stored["version"] == VERSION and stored["key"] == wanted and stored["path"] == relative:
                return dict(stored["row"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def put(self, relative: str, wanted: str, row) -> None:
        entry = {"version": VERSION, "key": wanted, "path": relative, "row": asdict(row)}
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = self._entry(relative)
        scratch = target.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps(entry, sort_keys=True), encoding="utf-8")
        scratch.replace(target)  # atomic: a reader sees the old entry or the new one
