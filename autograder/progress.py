"""A student's progress: every notebook of the course folder graded as ``check`` grades it, in a table.

The notebooks are only read: each is graded from a scratch copy in the sandbox (where bubblewrap
runs), exactly as ``python -m autograder check`` does. A missing, unreadable or unknown notebook is
one row of the table, never an error. Several notebooks are graded at once when cores and memory
allow (``autograder.parallel``); each grading is a separate process, because the checks seed
torch's global random generator and so cannot share a process with another grading (nor with a
student's kernel: the welcome notebook runs ``python -m autograder progress`` in a subprocess).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from autograder.exercises import ExerciseState
from autograder.sandbox import DEFAULT_TIMEOUT, Limits, unsandboxed_note

__all__ = ["Progress", "Row", "RowStatus", "progress", "unsandboxed_note"]


class RowStatus(StrEnum):
    """What became of one notebook of the table; its value is what `progress --json` says."""

    GRADED = "graded"
    MISSING = "missing"
    UNREADABLE = "unreadable"
    UNKNOWN = "unknown"  # not one of this course's notebooks
    ERROR = "error"  # the grader failed, not the notebook


@dataclass
class Row:
    """One notebook's line of the table."""

    notebook: str  # the course notebook's name, or the file's path in the course folder when not known
    path: str  # relative to the course folder
    status: RowStatus
    score: int = 0
    max_score: int = 0
    exercises: list[dict] = field(default_factory=list)  # as `check --json`, with each exercise's title
    message: str = ""  # why it was not graded
    unsandboxed: str | None = None  # why it ran without the sandbox
    cached: bool = False  # unchanged since an earlier run: its result was reused (autograder.progress_cache)

    def __post_init__(self):
        self.status = RowStatus(self.status)  # a row read back from the progress cache holds the value


@dataclass
class Progress:
    course: str
    rows: list[Row]

    def grader_failures(self) -> list[str]:
        """Why the grader itself could not grade some notebooks, each reason once (the command exits 2)."""
        return list(dict.fromkeys(row.message for row in self.rows if row.status is RowStatus.ERROR))

    @property
    def score(self) -> int:
        return sum(row.score for row in self.rows)

    @property
    def max_score(self) -> int:
        return sum(row.max_score for row in self.rows)

    def to_json(self) -> dict:
        rows = [{k: v for k, v in asdict(row).items() if k != "unsandboxed"} for row in self.rows]
        return {"course": self.course, "score": self.score, "max_score": self.max_score, "notebooks": rows}

    def table(self) -> str:
        """One line per notebook and a total; under a notebook that is under way, one indented line per
        unfinished exercise: "not started", or "failing: " and the first line of why."""
        width = max([len(row.notebook) for row in self.rows] + [len("total")])
        lines = [f"{'notebook':<{width}}  {'score':>7}  exercises"]
        for row in self.rows:
            score = f"{row.score}/{row.max_score}" if row.status is RowStatus.GRADED else "-"
            lines.append(f"{row.notebook:<{width}}  {score:>7}  {_summary(row)}")
            lines += [f"    {e['title']}: {_state(e)}" for e in _unfinished(row)]
        lines.append(f"{'total':<{width}}  {f'{self.score}/{self.max_score}':>7}")
        reused = sum(row.cached for row in self.rows)
        if reused:
            lines.append(
                f"({reused} of {len(self.rows)} notebooks unchanged since they were last graded: their results "
                "were reused; --fresh grades every notebook again)"
            )
        return "\n".join(lines)


def _state(exercise: dict) -> str:
    return "not started" if exercise["state"] == ExerciseState.NOT_STARTED else f"failing: {exercise['reason']}"


def _unfinished(row: Row) -> list[dict]:
    """The exercises to list under the row: none when all passed, or when none is started (the row says so)."""
    if row.status is not RowStatus.GRADED or all(e["state"] == ExerciseState.NOT_STARTED for e in row.exercises):
        return []
    return [e for e in row.exercises if not e["passed"]]


def _summary(row: Row) -> str:
    if row.status is not RowStatus.GRADED:
        return row.message
    marks = "".join("✓" if e["passed"] else "✗" for e in row.exercises)
    if all(e["passed"] for e in row.exercises):
        return f"{marks}  all passed"
    if all(e["state"] == ExerciseState.NOT_STARTED for e in row.exercises):
        return f"{marks}  not started"
    done = sum(e["passed"] for e in row.exercises)
    return f"{marks}  {done} of {len(row.exercises)} passed"


def find_course(start: Path | None = None) -> Path:
    """The ``course/`` folder at or above ``start`` (the current folder), else the repository's."""
    start = (start or Path.cwd()).resolve()
    for folder in [start, *start.parents]:
        if folder.name == "course" and (folder.parent / "autograder").is_dir():
            return folder
        if (folder / "course").is_dir():
            return folder / "course"
    return Path(__file__).resolve().parents[1] / "course"


def notebook_paths(course: Path) -> list[Path]:
    """Each course notebook where the release puts it, then every other notebook one folder down (a copy such as
    ``04_attention-Copy1.ipynb``; not a JupyterLab checkpoint)."""
    from autograder.notebooks import NOTEBOOKS
    from coursetools.notebook_vocabulary import NOTEBOOK_SUFFIX, notebook_files

    expected = [course / name / f"{name}{NOTEBOOK_SUFFIX}" for name in NOTEBOOKS]
    others = sorted(set(notebook_files(course)) - set(expected))
    return expected + others


def grade_row(path: Path, course: Path, timeout: float = DEFAULT_TIMEOUT, limits: Limits | None = None) -> Row:
    """Grade one notebook as ``check`` does; anything that stops it from being graded is the row's message."""
    from autograder.errors import GradingError
    from autograder.exercises import checks_for
    from autograder.grading import self_check
    from autograder.notebook_format import nbformat
    from autograder.notebooks import NOTEBOOKS
    from coursetools.notebook_vocabulary import is_course_notebook_path

    relative = str(path.relative_to(course))
    known = path.stem if path.stem in NOTEBOOKS and is_course_notebook_path(path) else None
    row = Row(known or relative, relative, RowStatus.MISSING)
    if known:
        row.max_score = sum(e.points for e in checks_for(known).exercises)
    if not path.exists():
        row.message = f"missing: no {relative}"
        return row
    from autograder.progress_cache import folder
    from autograder.sandbox import hidden_anyway

    kept = folder()  # the progress cache: student code must neither read nor write it
    private = [kept] if kept.is_dir() and not hidden_anyway(kept) else []
    try:
        report, row.unsandboxed = self_check(path, timeout=timeout, limits=limits or Limits(), private=private)
    except (OSError, ValueError, nbformat.reader.NotJSONError) as error:
        row.status, row.message = RowStatus.UNREADABLE, f"cannot read it as a notebook ({error})"
        return row
    except LookupError:
        row.status, row.message = RowStatus.UNKNOWN, "not one of this course's notebooks"
        return row
    except GradingError as error:  # the set-up failed (a worker that cannot start): never a score
        row.status, row.message = RowStatus.ERROR, str(error)
        return row
    except Exception as error:  # noqa: BLE001 - one notebook the grader could not handle is one row
        row.status, row.message = (
            RowStatus.ERROR,
            f"could not be graded: the grader failed ({type(error).__name__}: {error})",
        )
        return row
    titles = {e.id: e.title for e in checks_for(report.notebook).exercises}
    row.status, row.score, row.max_score = RowStatus.GRADED, report.score, report.max_score
    row.exercises = [dict(entry, title=titles[entry["id"]]) for entry in report.to_json()["exercises"]]
    if not known:  # a copy, e.g. 04_attention-Copy1.ipynb: say which notebook it is
        row.notebook = f"{relative} ({report.notebook})"
    return row


def _start_worker(threads: int) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # read by the sandbox for the student's process
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def _row(future, path: Path, course: Path) -> Row:
    """The future's row; a grading process that died (killed, out of memory) costs only its notebook."""
    try:
        return future.result()
    except Exception as error:  # noqa: BLE001 - BrokenProcessPool and the like
        relative = str(path.relative_to(course))
        return Row(
            relative,
            relative,
            RowStatus.ERROR,
            message=f"could not be graded: the grading process died ({type(error).__name__})",
        )


def row_line(row: Row, done: int, total: int) -> str:
    """The line ``progress`` says as each notebook's row is known: ``[3/14] 03_rope: 4/9 points``."""
    if row.status is RowStatus.GRADED:
        said = f"{row.score}/{row.max_score} points" + (", unchanged since the last run" if row.cached else "")
    else:
        said = row.message or row.status
    return f"[{done}/{total}] {row.notebook}: {said}"


def progress(
    course: Path | None = None,
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    limits: Limits | None = None,
    fresh: bool = False,
    cache: Path | None = None,
    on_row: Callable[[Row, int, int], None] | None = None,
) -> Progress:
    """Grade every notebook of ``course`` (default: ``find_course()``), ``workers`` at a time.

    A notebook unchanged since an earlier run (same code, same grading code and options) keeps its result
    (``autograder.progress_cache``, in ``cache`` or the user's cache folder); ``fresh`` grades them all again.
    ``on_row(row, done, total)`` is called for each notebook as soon as its row is known (a grading takes
    seconds, the whole course minutes), in the order they finish.
    """
    from autograder.progress_cache import Cache, key

    course = Path(course).resolve() if course else find_course()
    if not course.is_dir():
        raise FileNotFoundError(f"no course folder at {course}")
    limits = limits or Limits()
    paths = notebook_paths(course)
    options = {"timeout": timeout, "limits": asdict(limits)}
    store = Cache(course, cache)
    keys = {path: key(path, course, options) if path.is_file() else None for path in paths}
    rows: dict[Path, Row] = {}
    for path in paths:
        stored = None if fresh or keys[path] is None else store.get(str(path.relative_to(course)), keys[path])
        if stored is not None:
            try:
                rows[path] = Row(**{**stored, "cached": True})
            except TypeError:  # an entry of another shape: graded again
                pass
    report = on_row or (lambda row, done, total: None)
    for done, row in enumerate(rows.values(), 1):
        report(row, done, len(paths))
    todo = [path for path in paths if path not in rows]
    for path, row in _grade_rows(todo, course, workers, timeout, limits):
        rows[path] = row
        report(row, len(rows), len(paths))
        # kept only for a graded notebook that did not change while it was graded
        if row.status is RowStatus.GRADED and keys[path] and key(path, course, options) == keys[path]:
            store.put(str(path.relative_to(course)), keys[path], row)
    return Progress(str(course), [rows[path] for path in paths])


def _grade_rows(
    paths: list[Path], course: Path, workers: int | None, timeout: float, limits: Limits
) -> Iterator[tuple[Path, Row]]:
    """(path, row) of each notebook of ``paths``, as each is graded."""
    if not paths:
        return
    from autograder.parallel import default_workers, threads_per_grading

    workers = max(1, min(workers or default_workers(), len(paths)))
    if workers == 1:
        for path in paths:
            yield path, grade_row(path, course, timeout, limits)
        return
    # spawn, not fork: the grader has torch's thread pools, which do not survive a fork
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(threads_per_grading(workers),)
    ) as pool:
        futures = {pool.submit(grade_row, path, course, timeout, limits): path for path in paths}
        for future in as_completed(futures):
            yield futures[future], _row(future, futures[future], course)
