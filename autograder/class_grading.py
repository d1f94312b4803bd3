"""Autograde a whole class with nbgrader, several submissions at once, resumable after an interruption.

``python -m autograder grade-class ASSIGNMENT [--workers N] [--csv grades.csv] [--force] [--Class.trait=value ...]``,
run from the course root (where ``nbgrader_config.py`` is), like ``nbgrader autograde``.

- Each worker is a long-lived process that holds one ``NbGraderAPI`` configured exactly as ``nbgrader
  autograde`` is (the same config files, the same ``--Class.trait=value`` options), and grades students
  from a queue with nbgrader's own ``Autograde`` converter: TrustedVerdict, the sandbox and the gradebook
  are nbgrader's. Starting nbgrader and importing torch is paid once per worker, not once per submission,
  and so is importing the checks (``_import_grading``); each submission's sandboxed process is forked from
  the worker's zygote (``autograder.zygote``).
- Resumable: a submission is skipped when the gradebook holds it and its autograded notebooks are not
  older than the submitted ones (nbgrader's ``timestamp.txt`` where there is one) and hold a verdict
  in every test cell. nbgrader writes the graded notebook only after ``SaveAutoGrades`` has committed
  its grades (a sanitized one, without verdicts, comes first), so a run killed mid-way leaves every
  submission either done or regraded from scratch (``force``) by the next run.
- Before anyone is graded, the fast part of ``python -m autograder doctor`` (``doctor.preflight``: the sandbox
  starts, and a sandboxed worker imports the course's package, torch and every check) runs once: a broken set-up stops here, with the reason and the fix, and grades nobody (exit 2).
- A submission the grader could not grade (``TrustedVerdict`` met a ``GradingError``: its worker failed
  before any student code ran, a limit could not be set) gets no score: nbgrader's autograde of it fails and
  the gradebook holds nothing for it (``nbgrader_plugin.forget_ungraded``). Such submissions are counted
  and listed apart, "could not be graded", and the exit status is 2. When the first ``STOP_AFTER`` results
  are all such failures for the same reason, the set-up is broken whatever the preflight saw: the rest of
  the class is not started, and the command says so.
- A submission that nbgrader cannot grade for its own reasons (a broken file, not a course notebook) costs
  only that student: the others are graded, the failures are listed, and the exit status is 1.
- Several processes write to the SQLite gradebook. Each write is short and SQLite waits up to 5 s for a
  lock; a grading that still hits "database is locked" is retried (counted in the summary).
- The CSV is written by nbgrader's own exporter, as ``nbgrader export --to FILE`` writes it.
"""

from __future__ import annotations

import gc
import glob
import multiprocessing
import os
import queue
import random
import re
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

LOCK_RETRIES = 3  # gradings that hit a locked gradebook, tried again after a short random pause
STOP_AFTER = 3  # first results that, all ungraded for one reason, mean the set-up is broken


class SetupBroken(RuntimeError):
    """Grading cannot work here; ``lines`` say what failed and how to fix it."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass
class Outcome:
    student: str
    ok: bool
    seconds: float
    message: str = ""  # why it failed
    retries: int = 0  # times the gradebook was locked
    ungraded: str | None = None  # the grader could not grade it (not the student's doing): why

    @property
    def graded(self) -> bool:
        return self.ok and self.ungraded is None


def configured_app(app_class, argv: list[str]):
    """An nbgrader application configured as on the command line, without running it."""
    app = app_class()
    app.initialize(argv)
    return app


_API = None  # this worker's NbGraderAPI


def _start_worker(assignment: str, options: list[str], threads: int, phases=None) -> None:
    global _API
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # the student's process reads it (autograder.sandbox)
    from nbgrader.apps import AutogradeApp, NbGraderAPI

    from autograder import nbgrader_plugin
    from autograder.nbgrader_plugin import quiet_gradebook_warnings

    if phases is not None:  # each grading's phases, to the bar in the parent (``Doing``)
        nbgrader_plugin.phase_listener = lambda _assignment, student, phase: phases.put((student, str(phase)))
    quiet_gradebook_warnings()  # also where the course's nbgrader_config.py is not the one in use
    app = configured_app(AutogradeApp, [assignment, "--log-level=WARN", *options])
    _API = NbGraderAPI(coursedir=app.coursedir, parent=app)
    _import_grading(assignment)


def _import_grading(assignment: str) -> None:
    """Import what grading this assignment needs (its checks, their oracles), then freeze it all out of the
    garbage collector's sight: it lives as long as the worker, and each collection would walk it again."""
    from autograder import grading
    from autograder.exercises import checks_for

    try:
        checks = checks_for(assignment)
    except LookupError:  # an assignment of several notebooks, or none of the course's: imported when graded
        checks = None
    grading.import_quietly(checks.oracle_imports if checks else ())
    gc.collect()
    gc.freeze()


_EXCEPTION = re.compile(r"\s*(?:\[\w+\] )?([A-Za-z_][\w.]*(?:Error|Exception|Unavailable|Interrupt|Exit)): (.+)")


def _reason(result: dict) -> str:
    """The exception that stopped nbgrader, from its log, in one line (not its generic NbGraderException)."""
    text = f"{result.get('log', '')}\n{result.get('error', '')}"
    found = [m.groups() for m in map(_EXCEPTION.match, text.splitlines()) if m and "NbGraderException" not in m[1]]
    if found:
        return f"{found[-1][0].rsplit('.', 1)[-1]}: {found[-1][1].strip()}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "nbgrader failed without a message"


def autograde_one(assignment: str, student: str) -> Outcome:
    """Autograde one submission in this worker (``force``: the caller decided it needs grading)."""
    started, retries = time.monotonic(), 0
    while True:
        result = _API.autograde(assignment, student, force=True, create=True)
        said = f"{result.get('error', '')}\n{result.get('log', '')}"
        if result["success"] or "database is locked" not in said or retries == LOCK_RETRIES:
            break
        retries += 1
        time.sleep(random.uniform(0.5, 2.0))
    from autograder.nbgrader_plugin import ungraded_reasons

    ungraded = ungraded_reasons.pop((assignment, student), None)
    message = "" if result["success"] else ungraded or _reason(result)
    return Outcome(student, bool(result["success"]), time.monotonic() - started, message, retries, ungraded)


def submitted_students(coursedir, assignment: str) -> list[str]:
    """The students with a submission, found as ``nbgrader autograde`` finds them (submitted/*/ASSIGNMENT)."""
    pattern = coursedir.format_path(coursedir.submitted_directory, "*", assignment)
    return sorted(Path(path).parent.name for path in glob.glob(pattern) if os.path.isdir(path))


def already_graded(coursedir, gradebook, assignment: str, student: str) -> bool:
    """The gradebook holds the submission, and each of its notebooks was autograded after it was submitted."""
    return not_graded_because(coursedir, gradebook, assignment, student) is None


def not_graded_because(coursedir, gradebook, assignment: str, student: str) -> str | None:
    """Why the submission has no complete autograded result (None: it has one), in a few words.

    ``already_graded`` for ``grade-class``, which regrades such a submission, and ``report``, which
    lists it: autograding failed (nbgrader removes the autograded folder of a submission it could not
    grade), never ran, was stopped, or ran before the student submitted again.
    """
    from nbgrader.api import MissingEntry

    try:
        gradebook.find_submission(assignment, student)
    except MissingEntry:
        return "not autograded"
    submitted = Path(coursedir.format_path(coursedir.submitted_directory, student, assignment))
    autograded = Path(coursedir.format_path(coursedir.autograded_directory, student, assignment))
    new, old = (coursedir.get_existing_timestamp(str(folder)) for folder in (submitted, autograded))
    if new is not None and (old is None or old < new):
        return "submitted again after it was autograded"
    names = {notebook.name for notebook in gradebook.find_assignment(assignment).notebooks}
    for notebook in submitted.glob("*.ipynb"):
        graded = autograded / notebook.name
        if notebook.stem not in names:
            continue
        if not graded.is_file():
            return "no autograded notebook (autograding failed or has not run)"
        if graded.stat().st_mtime < notebook.stat().st_mtime:
            return "submitted again after it was autograded"
        if not _complete(graded):
            return "autograding did not finish"
    return None


def _complete(path: Path) -> bool:
    """Whether the autograded notebook went through grading, not only through nbgrader's first pass.

    nbgrader writes the autograded notebook twice: sanitized (outputs cleared), then graded. Only the
    second has TrustedVerdict's verdict in every test cell; a run killed between the two, or while
    nbconvert was writing, leaves a file without them (or a part of one).
    """
    import nbformat

    from coursetools.notebook_vocabulary import is_test_cell

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 - any unreadable file means: grade it again
        return False
    tests = [cell for cell in nb.cells if cell.cell_type == "code" and is_test_cell(cell)]
    return bool(tests) and all(cell.get("outputs") for cell in tests)


def _preflight(app) -> None:
    """Raise ``SetupBroken`` unless a worker starts here as grading will start it (``doctor.preflight``)."""
    from autograder.doctor import preflight
    from autograder.nbgrader_plugin import TrustedVerdict, private_paths
    from autograder.sandbox import Limits

    verdict = TrustedVerdict(parent=app)  # the limits grading will set, from the same configuration
    limits = Limits.from_settings(verdict.memory_limit, verdict.max_processes, verdict.max_file_size)
    found = preflight(Path(app.coursedir.root).resolve(), private_paths(app.coursedir), limits)
    if any(f.ok is False for f in found):
        raise SetupBroken([f.line() for f in found])


class Doing:
    """What each submission being graded is doing now, said after the class's bar and redrawn every second: a hung
    submission kept the bar at 1/2 for two minutes with nothing else on the screen (issue 52 §5)."""

    WIDTH = 60  # characters of each submission's phase shown

    def __init__(self, phases):
        self.phases, self.now = phases, {}

    def read(self) -> None:
        """Take in every phase the workers have said since the last read."""
        while True:
            try:
                student, phase = self.phases.get_nowait()
            except queue.Empty:
                return
            self.now[student] = phase

    def done(self, student: str) -> None:
        self.now.pop(student, None)

    def line(self) -> str:
        return " | ".join(f"{student}: {phase[: self.WIDTH]}" for student, phase in sorted(self.now.items()))


def _broken_setup(outcomes: list[Outcome]) -> str | None:
    """The reason, when the first ``STOP_AFTER`` results were all ungraded for that one reason."""
    first = outcomes[:STOP_AFTER]
    reasons = {o.ungraded for o in first}
    return first[0].ungraded if len(first) == STOP_AFTER and len(reasons) == 1 and None not in reasons else None


def grade_class(
    assignment: str,
    workers: int | None = None,
    csv: str | None = "grades.csv",
    force: bool = False,
    options: list[str] = (),
    preflight: bool = True,
) -> tuple[list[Outcome], int, str | None]:
    """Autograde every submission of ``assignment`` not graded yet.

    Returns the outcomes, how many were skipped (graded already), and why the run stopped early (None: it did
    not). ``preflight=False`` skips the set-up check (``_preflight``), for tests of the early stop.
    """
    from nbgrader.api import Gradebook
    from nbgrader.apps import AutogradeApp, ExportApp

    from autograder.nbgrader_plugin import TrustedVerdict
    from autograder.parallel import default_workers, threads_per_grading
    from autograder.sandbox import SandboxUnavailable, unavailable_reason

    app = configured_app(AutogradeApp, [assignment, "--log-level=WARN", *options])
    if refusal := TrustedVerdict(parent=app).refusal(unavailable_reason()):  # say it once, not once per student
        raise SandboxUnavailable(refusal)
    coursedir = app.coursedir
    with Gradebook(coursedir.db_url, coursedir.course_id) as gradebook:  # also creates it, once, before the workers
        gradebook.find_assignment(assignment)  # MissingEntry: not released with generate_assignment
        students = submitted_students(coursedir, assignment)
        todo = [s for s in students if force or not already_graded(coursedir, gradebook, assignment, s)]
    if todo and preflight and unavailable_reason() is None:  # unsandboxed by choice: nothing to start here
        _preflight(app)
    workers = max(1, min(workers or default_workers(share=1.0), len(todo) or 1))
    outcomes: list[Outcome] = []
    stopped = None
    if todo:
        context = multiprocessing.get_context("spawn")  # no fork of a process that has torch's thread pools
        with context.Manager() as manager:
            outcomes, stopped = _grade_todo(
                assignment, todo, workers, options, context, Doing(manager.Queue()), threads_per_grading(workers)
            )
    if csv:
        configured_app(ExportApp, ["--to", csv, "--log-level=WARN", *options]).start()
    return outcomes, len(students) - len(todo), stopped


def _grade_todo(assignment, todo, workers, options, context, doing, threads) -> tuple[list[Outcome], str | None]:
    """Grade ``todo`` in ``workers`` processes, with the class's bar and what each grading is doing under it."""
    from tqdm import tqdm

    outcomes: list[Outcome] = []
    stopped = None
    with (
        ProcessPoolExecutor(
            workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(assignment, list(options), threads, doing.phases),
        ) as pool,
        tqdm(total=len(todo), desc=f"autograde {assignment}", unit="student", file=sys.stderr) as bar,
    ):
        # One submission per free worker, so that a run that stops early has started no more than it must.
        waiting = iter(todo)
        running = {pool.submit(autograde_one, assignment, student) for student in islice(waiting, workers)}
        while running:
            done, running = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
            doing.read()
            for future in done:
                outcome = future.result()
                doing.done(outcome.student)
                outcomes.append(outcome)
                if not outcome.ok:
                    bar.write(
                        f"{outcome.student}: {'could not be graded' if outcome.ungraded else 'not graded'}: "
                        f"{outcome.message}",
                        file=sys.stderr,
                    )
                bar.update()
                stopped = stopped or _broken_setup(outcomes)
            failed = sum(not o.graded for o in outcomes)
            bar.set_postfix_str(f"failed={failed}" + (f" | {doing.line()}" if doing.now else ""))  # redraws
            if stopped is None:
                running |= {pool.submit(autograde_one, assignment, student) for student in islice(waiting, len(done))}
    return outcomes, stopped


def main(assignment: str, workers: int | None, csv: str | None, force: bool, options: list[str]) -> int:
    """The command line: one summary line, then who could not be graded and who failed.

    Exit 0 when every submission was graded; 1 when some failed for their own reasons (a broken file); 2 on bad
    input, a broken set-up, or when the grader could not grade a submission (a failure of the grader, never a score).
    """
    from nbgrader.api import MissingEntry

    from autograder.sandbox import SandboxUnavailable

    if not Path("nbgrader_config.py").is_file():
        print("error: run grade-class from the course root, the folder with nbgrader_config.py", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        outcomes, skipped, stopped = grade_class(assignment, workers, csv, force, options)
    except MissingEntry:
        print(
            f"error: no assignment {assignment!r} in the gradebook: run `nbgrader generate_assignment "
            f"{assignment} --CourseDirectory.release_directory=build/release --force` first (it records the assignment "
            "and leaves course/ as it is)",
            file=sys.stderr,
        )
        return 2
    except SandboxUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except SetupBroken as error:
        print("error: grading cannot work on this machine as it is set up; nobody was graded:", file=sys.stderr)
        for line in error.lines:
            print(f"  {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: run the same command again to grade the rest", file=sys.stderr)
        return 130
    except BrokenProcessPool:  # a worker killed from outside (the OOM killer): what is graded stays graded
        print(
            "error: a grading worker died (out of memory?): run the same command again, perhaps with "
            "fewer --workers, to grade the rest",
            file=sys.stderr,
        )
        return 1
    ungraded = [o for o in outcomes if o.ungraded]
    failed = [o for o in outcomes if not o.ok and not o.ungraded]
    seconds = time.monotonic() - started
    print(
        f"{assignment}: {sum(o.graded for o in outcomes)} graded, {skipped} already graded (skipped), "
        f"{len(ungraded)} could not be graded, {len(failed)} failed, "
        f"{sum(o.retries for o in outcomes)} retries on a locked gradebook, "
        f"{seconds:.1f} s" + (f"; grades in {csv}" if csv else "")
    )
    if ungraded:
        print("could not be graded (the grader failed, not the student; no score was recorded):")
        for outcome in ungraded:
            print(f"  {outcome.student}: {outcome.ungraded}")
    if failed:
        print("failed:")
        for outcome in failed:
            print(f"  {outcome.student}: {outcome.message}")
    if stopped:
        print(
            f"stopped: the first {STOP_AFTER} submissions could not be graded for the same reason, so the grading "
            f"set-up is broken; the rest were not started. Fix it and run the same command again: {stopped}",
            file=sys.stderr,
        )
    return 2 if ungraded else 1 if failed else 0
