"""The results ``progress`` keeps between runs, so that it regrades only the notebooks that changed.

An entry is one notebook's row of the table, filed under a key: the SHA-256 of everything its grade depends
on, namely

- the code the grader runs from the notebook: every code cell but the test cells, in order (its answers, and
  the demos, which run too), read as plain JSON (a cache hit needs neither torch nor nbformat's validation);
- the course's grading code: every file of the ``autograder`` and ``coursetools`` packages, and the versions
  of Python and torch;
- the options that can change a grade: the time limit and the resource limits.

Grading never depends on another notebook (the checks hand a notebook the course's own versions of earlier
parts), so one changed notebook costs one grading.

Each entry is signed with HMAC-SHA256 under a random key created beside the cache (mode 0600). An entry whose
signature or key does not match (a forged or edited file, a half-written one) is ignored, graded again and
overwritten: a forged entry cannot raise a score. The folder is ``$COURSE_PROGRESS_CACHE`` if set, else
``transformer-course/progress`` in the user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``): never in
``course/``, and hidden from student code while it is graded (the sandbox hides the user's home and is told
of this folder too). nbgrader's grading never reads it, and ``progress --fresh`` ignores it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
from dataclasses import asdict
from functools import cache
from importlib import metadata
from pathlib import Path

VERSION = 1  # of the entry format


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
    from autograder.grading import is_test_cell

    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        sources = []
        for cell in cells:
            if cell.get("cell_type") != "code":
                continue
            if is_test_cell(cell):  # grading never runs the student's copy of a test cell
                continue
            source = cell.get("source", "")
            sources.append(source if isinstance(source, str) else "".join(source))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return hashlib.sha256(json.dumps(sources).encode()).hexdigest()


def key(path: Path, course: Path, options: dict) -> str | None:
    code = graded_code(path)
    if code is None:
        return None
    where = str(path.relative_to(course))
    text = json.dumps({"path": where, "code": code, "grading": grading_code(), "options": options}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class Cache:
    """Signed rows, one file per notebook path of one course folder."""

    def __init__(self, course: Path, root: Path | None = None):
        self.root = (root or folder()) / hashlib.sha256(str(course.resolve()).encode()).hexdigest()[:16]
        self._secret: bytes | None = None

    def _key_file(self) -> Path:
        return self.root.parent / "signing.key"

    def secret(self) -> bytes:
        if self._secret is None:
            path = self._key_file()
            if not path.is_file() or len(path.read_bytes()) != 32:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as file:
                    file.write(secrets.token_bytes(32))
            self._secret = path.read_bytes()
        return self._secret

    def _entry(self, relative: str) -> Path:
        return self.root / (hashlib.sha256(relative.encode()).hexdigest()[:24] + ".json")

    def _sign(self, payload: str) -> str:
        return hmac.new(self.secret(), payload.encode(), hashlib.sha256).hexdigest()

    def get(self, relative: str, wanted: str) -> dict | None:
        """The row stored for ``relative`` under the key ``wanted``, if its signature holds; else None."""
        try:
            entry = json.loads(self._entry(relative).read_text(encoding="utf-8"))
            payload, signature = entry["payload"], entry["signature"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not hmac.compare_digest(self._sign(payload), str(signature)):
            return None
        stored = json.loads(payload)
        return stored["row"] if stored.get("key") == wanted and stored.get("path") == relative else None

    def put(self, relative: str, wanted: str, row) -> None:
        payload = json.dumps({"key": wanted, "path": relative, "row": asdict(row)}, sort_keys=True)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = self._entry(relative)
        scratch = target.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps({"payload": payload, "signature": self._sign(payload)}), encoding="utf-8")
        scratch.replace(target)  # atomic: a reader sees the old entry or the new one
