"""A grader that cannot run never produces grades, through every way of grading.

The instructor's case: the course's package where the sandbox does not show it (here, a bubblewrap that
mounts an empty folder over the ``autograder`` package, or over torch, exactly as the sandbox hides /tmp and
the homes), so every worker fails before any student code runs. ``check`` and ``progress`` say so in one line
and exit 2; nbgrader's autograde of the submission fails with the reason and leaves no score in the gradebook
or the CSV; ``grade-class`` stops before grading anyone, or, past its preflight, after the first few. ``doctor``
names the problem and the fix. And the worker's restart replays the cells as they first ran.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from notebooks import ROOT, answer_source, read, require_sandbox, solution_path, with_answer
from test_class_grading import BROKEN, make_class
from test_nbgrader_e2e import Student, _one_right_submission, nbgrader

import autograder
from autograder.doctor import versions_finding
from autograder.phases import PREFIX

NOTEBOOK = "02_normalization"
BREAKING_BWRAP = """#!{python}
import os, sys
args = sys.argv[1:]
if "--chdir" in args:  # a sandbox for a worker (the availability probe has none): break it
    at = args.index("--chdir")
    args[at:at] = {extra!r}
os.execv({bwrap!r}, ["bwrap", *args])
"""
# What each broken set-up adds to the worker's bubblewrap command line, and what the worker then says.
HIDDEN = {
    "autograder": (["--tmpfs", str(Path(autograder.__file__).resolve().parent)], "No module named 'autograder'"),
    # an empty folder where torch was: an empty namespace package, without torch.nn
    "torch": (["--tmpfs", str(Path(torch.__file__).resolve().parent)], "from 'torch' (unknown location)"),
    "mount": (["--ro-bind", "/nonexistent-course-folder", "/mnt"], "Can't find source path"),  # bubblewrap fails
}


def hiding(folder: Path, what: str = "autograder") -> dict[str, str]:
    """An environment whose bubblewrap hides ``what`` from every worker, as it would hide a package under /tmp
    (or, for "mount", cannot make one of its mounts)."""
    script = folder / "bwrap-hiding"
    script.write_text(BREAKING_BWRAP.format(python=sys.executable, extra=HIDDEN[what][0], bwrap=shutil.which("bwrap")))
    script.chmod(0o755)
    return dict(os.environ, AUTOGRADER_BWRAP=str(script))


def _autograder(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autograder", *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )


def _course_with(tmp_path: Path, nb) -> Path:
    tmp_path.mkdir(exist_ok=True)
    tmp_path.chmod(0o755)
    path = tmp_path / "course" / NOTEBOOK / f"{NOTEBOOK}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    shutil.copytree(ROOT / "data" / "tinystories", tmp_path / "data" / "tinystories")
    return path


# --- check and progress: one line, exit 2 ---------------------------------------------------------------------


@pytest.mark.parametrize("what", sorted(HIDDEN))
def test_check_says_the_grader_could_not_run(tmp_path, what):
    require_sandbox()
    path = _course_with(tmp_path, read(solution_path(NOTEBOOK)))
    done = _autograder("check", str(path), "--json", env=hiding(tmp_path, what))
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr[-2000:])
    (line,) = [line for line in done.stderr.strip().splitlines() if not line.startswith(PREFIX)]  # less the phases
    assert "could not be graded" in line and "before any student code ran" in line, line
    assert HIDDEN[what][1] in line and "python -m autograder doctor" in line, line
    assert "your code" not in line  # never blamed on the student


def test_progress_exits_2_and_keeps_nothing(tmp_path):
    require_sandbox()
    path = _course_with(tmp_path, read(solution_path(NOTEBOOK)))
    cache = tmp_path / "cache"
    env = dict(hiding(tmp_path), COURSE_PROGRESS_CACHE=str(cache))
    done = _autograder("progress", str(path.parents[1]), "--json", "--workers", "1", env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No module named 'autograder'" in errors[0], done.stderr
    (row,) = [r for r in json.loads(done.stdout)["notebooks"] if r["notebook"] == NOTEBOOK]
    assert row["status"] == "error" and row["score"] == 0 and row["exercises"] == [], row
    assert not list(cache.rglob("*.json"))  # nothing kept: the next run grades it again


# --- nbgrader and grade-class: no score anywhere ----------------------------------------------------------------


def _no_scores(course: Path, students: list[str], listed: bool | None = True) -> None:
    """The gradebook holds no submission of ``students`` and the CSV export no score for them.

    ``listed``: nbgrader met the students (their autograde failed), so the export has a line for each, with
    empty scores; False: grading stopped before nbgrader met them, and the export does not know them; None:
    some of each."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in students:
            with pytest.raises(MissingEntry):
                gradebook.find_submission(NOTEBOOK, student)
    assert not any((course / "autograded").glob(f"*/{NOTEBOOK}/*.ipynb"))
    assert nbgrader(course, "export", "--to", str(course / "export.csv")).returncode == 0
    with (course / "export.csv").open() as file:
        rows = {row["student_id"]: row for row in csv.DictReader(file) if row["student_id"] in students}
    if listed is not None:
        assert set(rows) == (set(students) if listed else set())
    assert all(row["score"] == row["raw_score"] == "" for row in rows.values()), rows


def test_nbgrader_autograde_fails_the_submission_and_records_no_score(tmp_path):
    require_sandbox()
    _one_right_submission(tmp_path, NOTEBOOK)
    done = nbgrader(tmp_path, "autograde", NOTEBOOK, env=hiding(tmp_path))
    assert done.returncode != 0
    assert "No module named 'autograder'" in done.stderr and "could not be graded" in done.stderr, done.stderr[-3000:]
    assert "taken out of the gradebook" in done.stderr
    _no_scores(tmp_path, ["full"])
    report = _autograder("report", NOTEBOOK, cwd=tmp_path)  # the report lists it as ungraded, with the reason
    assert report.returncode == 0, report.stderr[-2000:]
    assert (
        "no graded submissions" in report.stdout
        and "1 could not be graded: full (could not be graded" in report.stdout
        and "No module named 'autograder'" in report.stdout
    ), report.stdout
    # once the set-up is mended, it grades, and the reason is gone
    assert nbgrader(tmp_path, "autograde", NOTEBOOK).returncode == 0
    assert "could not be graded" not in _autograder("report", NOTEBOOK, cwd=tmp_path).stdout


def test_a_submission_that_submitted_nothing_keeps_nbgraders_zero(tmp_path):
    """Only submissions that could not be graded export empty: a student with no submission folder keeps 0."""
    require_sandbox()
    _one_right_submission(tmp_path, NOTEBOOK)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        gradebook.add_student("absent")
    assert nbgrader(tmp_path, "autograde", NOTEBOOK).returncode == 0
    assert nbgrader(tmp_path, "export", "--to", str(tmp_path / "export.csv")).returncode == 0
    with (tmp_path / "export.csv").open() as file:
        rows = {row["student_id"]: row for row in csv.DictReader(file)}
    assert float(rows["absent"]["score"]) == 0.0 and float(rows["full"]["score"]) == 6.0, rows


STUDENTS = {name: Student({}, set()) for name in ("ann", "bob", "cy", "dee", "eve")}


def test_grade_class_stops_before_grading_anyone(tmp_path):
    require_sandbox()
    course = make_class(tmp_path / "class", STUDENTS)
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade-class", NOTEBOOK],
        cwd=course,
        env=hiding(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, (done.stdout, done.stderr[-3000:])
    assert "nobody was graded" in done.stderr and "FAIL  worker" in done.stderr, done.stderr
    assert "No module named 'autograder'" in done.stderr and "fix:" in done.stderr
    assert not (course / "grades.csv").exists()
    _no_scores(course, list(STUDENTS), listed=False)


EARLY_STOP = """
import sys
from autograder.class_grading import STOP_AFTER, grade_class
outcomes, skipped, stopped = grade_class({notebook!r}, workers=1, csv=None, preflight=False)
print(len(outcomes), STOP_AFTER, sum(o.ungraded is not None for o in outcomes), stopped, sep="\\n")
"""


def test_grade_class_past_its_preflight_stops_after_the_first_few(tmp_path):
    """A set-up that breaks after the preflight (simulated by skipping it): the first STOP_AFTER results all
    could not be graded for one reason, so the rest of the class is not started and nobody gets a score."""
    require_sandbox()
    course = make_class(tmp_path / "class", STUDENTS)
    shutil.rmtree(course / "submitted" / BROKEN)  # a failure of its own, which is not the set-up's
    env = hiding(tmp_path)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        [sys.executable, "-c", EARLY_STOP.format(notebook=NOTEBOOK)],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    count, stop_after, ungraded, stopped = done.stdout.strip().splitlines()[-4:]
    # one worker, handed one submission at a time: exactly the first STOP_AFTER were tried
    assert int(count) == int(stop_after) < len(STUDENTS), done.stdout
    assert int(ungraded) == int(count) and "No module named 'autograder'" in stopped, done.stdout
    _no_scores(course, list(STUDENTS), listed=None)


# --- doctor ------------------------------------------------------------------------------------------------------


def test_doctor_passes_where_grading_works_and_checks_the_exchange(tmp_path):
    require_sandbox()
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    exchange.chmod(0o755)  # not the guide's 1777
    done = _autograder("doctor", f"--Exchange.root={exchange}", cwd=ROOT)
    lines = {line.split(":")[0].split()[-1]: line for line in done.stdout.splitlines() if ":" in line}
    for item in ("sandbox", "worker", "warm", "data", "versions"):
        assert lines[item].startswith("ok"), done.stdout
    assert lines["exchange"].startswith("FAIL") and "chmod 1777" in lines["exchange"], done.stdout
    assert done.returncode == 1
    exchange.chmod(0o1777)
    done = _autograder("doctor", f"--Exchange.root={exchange}", cwd=ROOT)
    assert done.returncode == 0 and "grading can run here" in done.stdout, done.stdout + done.stderr[-2000:]
    assert stat.S_IMODE(exchange.stat().st_mode) == 0o1777


@pytest.mark.parametrize("what", sorted(HIDDEN))
def test_doctor_names_a_package_the_sandbox_hides(tmp_path, what):
    require_sandbox()
    done = _autograder("doctor", cwd=ROOT, env=hiding(tmp_path, what))
    assert done.returncode == 1
    (worker,) = [line for line in done.stdout.splitlines() if "worker:" in line]
    assert worker.startswith("FAIL") and HIDDEN[what][1] in worker and "fix:" in worker, done.stdout


def test_versions_that_differ_from_the_lock_are_named(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("# pinned\ntorch==0.0.1\nno-such-package-here==1.0\n")
    finding = versions_finding(lock, ROOT / "pyproject.toml")
    assert finding.ok is False and "torch" in finding.said and "no-such-package-here missing" in finding.said
    assert versions_finding(ROOT / "requirements.lock", ROOT / "pyproject.toml").ok


# --- a restart replays the cells as they first ran --------------------------------------------------------------


def test_a_restart_replays_a_cell_that_raised_after_its_definitions(tmp_path):
    """An answer cell whose ``def`` ran before a NameError, and a later cell that ends the process: after the
    restart every exercise grades as it does without the exit (the def is replayed, expecting its error)."""
    require_sandbox()
    solution = read(solution_path(NOTEBOOK))
    raising = with_answer(solution, "layer_norm", answer_source(solution, "layer_norm") + "\nundefined_name\n")
    exiting = nbformat.from_dict(json.loads(nbformat.writes(raising)))
    exiting.cells.append(nbformat.v4.new_code_cell("import os\nos._exit(3)"))
    reports, phases = {}, {}
    for name, nb in (("raising", raising), ("exiting", exiting)):
        path = _course_with(tmp_path / name, nb)
        done = _autograder("check", str(path), "--json")
        reports[name] = {e["id"]: e["passed"] for e in json.loads(done.stdout)["exercises"]}
        phases[name] = [line.removeprefix(PREFIX) for line in done.stderr.splitlines() if line.startswith(PREFIX)]
    assert reports["exiting"] == reports["raising"], reports
    assert "layer_norm" in reports["raising"]
    # The restart shows as it goes: once, when a check first needs the process, then each cell replayed
    # (all but the one that ended the process), then the checks go on where they were.
    said = phases["exiting"]
    cells = sum(line.startswith("running cells ") for line in said)
    assert cells == sum(line.startswith("running cells ") for line in phases["raising"]) + 1, said
    again = said.index("starting Python again")
    assert said.count("starting Python again") == 1 and said[again - 1].startswith("checks "), said
    replayed = [line.split(" (")[0] for line in said[again + 1 : again + cells]]
    assert replayed == [f"replaying cells {i}/{cells - 1}" for i in range(1, cells)], said
    step, total = map(int, said[again - 1].split()[1].split("/"))
    assert [line.split(" (")[0] for line in said[again + cells :]] == [
        f"checks {j}/{total}" for j in range(step + 1, total + 1)
    ], said
