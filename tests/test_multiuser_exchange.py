"""A class on one machine, as on a JupyterHub: an instructor and two students, each a real Unix account.

The instructor releases notebook 02 into nbgrader's exchange; each student fetches it into their
home, answers it and submits it (both at once); the instructor collects and autogrades (student
code in the bubblewrap sandbox, started by the instructor, not by root), and the gradebook holds
each student's score. Between the steps student 2 tries, as themselves, to reach what is not
theirs: student 1's submission in the exchange (by its real name, which no student can list),
student 1's home, the instructor's course folder and gradebook, the release; and submits a
notebook in student 1's name, which ``collect`` must leave out (autograder/exchange.py says why
nbgrader's own exchange needs that). After grading, neither student can read the graded copies
or the gradebook. Every command is one that docs/instructors.md ("A class on one machine, step by
step") gives, in the same order, run as the account that would run it.

It creates and deletes accounts (``useradd``/``userdel``), so it runs only as root (CI runs the
suite as root) and skips elsewhere, saying why. The accounts run this checkout's Python; where it is
installed in a folder they cannot enter (pyenv under /root), each command runs in a private mount namespace
that lends them the Python installation alone (``_with_python_lent``). The
last two tests run everywhere, as one user: autograder/exchange.py's two classes on their own.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from notebooks import ROOT, answer_source, grade_id, read, solution_path

from autograder.exercises import checks_for
from coursetools.notebook_vocabulary import answer_id

NOTEBOOK = "02_normalization"  # two exercises, the quickest class to grade
COURSE_ID = "transformer-from-scratch"
TOOLS = ("useradd", "userdel", "runuser")

# What each account writes in ~/.jupyter/nbgrader_config.py (the recipe's step 3).
USER_CONFIG = """c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "{course_id}"
c.Exchange.root = "{exchange}"
c.ExchangeFactory.submit = "autograder.exchange.PrivateSubmit"
c.ExchangeFactory.collect = "autograder.exchange.OwnerCheckedCollect"
"""

# Run as a student: try each thing they must not be able to do, say what happened.
PROBE = r"""
import json, os, sys
def attempt(what, path):
    try:
        if what == "list":
            os.listdir(path)
        elif what == "read":
            with open(path, "rb") as f:
                f.read(1)
        elif what == "write":
            with open(path, "r+b"):
                pass
        elif what == "create":
            with open(path, "x"):
                pass
        elif what == "rename":
            os.rename(path, path + ".mine")
    except OSError as error:
        return type(error).__name__
    return "done"
print(json.dumps({key: attempt(what, path) for key, (what, path) in json.loads(sys.argv[1]).items()}))
"""


def _closed_to_others(path: Path) -> str | None:
    """The first folder on the way to ``path`` that other users cannot enter, or ``path`` if they cannot read it."""
    path = path.resolve()
    for folder in [*reversed(path.parents), path]:
        mode = folder.stat().st_mode
        if folder.is_dir() and not mode & stat.S_IXOTH:
            return f"{folder} (mode {stat.filemode(mode)})"
    if not path.stat().st_mode & stat.S_IROTH:
        return f"{path} (mode {stat.filemode(path.stat().st_mode)})"
    return None


def _skip_reason() -> str | None:
    if sys.platform != "linux":
        return "creates Unix accounts: Linux only"
    if os.geteuid() != 0:
        return "creates and deletes Unix accounts (useradd): runs as root only, as in CI"
    missing = [tool for tool in (*TOOLS, "bwrap") if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (apt-get install passwd util-linux bubblewrap)"
    # The accounts run this checkout's Python, its autograder and its solutions. A Python installed in a
    # private folder (pyenv under /root, this project's CI machines) is lent to them (``_lent_python``).
    import nbgrader

    for path in (
        ROOT / "nbgrader_config.py",
        solution_path(NOTEBOOK),
        Path(sys.executable),
        Path(nbgrader.__file__),
        Path(sys.base_prefix) / "lib",
    ):
        closed = _closed_to_others(path)
        if closed and not (_lent_python() and shutil.which("unshare")):
            return f"other users cannot read this checkout or its Python: {closed}"
    return None


def _lent_python() -> tuple[Path, Path] | None:
    """(a private folder, the Python installation inside it) when this Python lies in a folder other users
    cannot enter, as pyenv's under /root does; None when they can reach it."""
    base = Path(sys.base_prefix).resolve()
    for folder in base.parents:
        if folder != Path("/") and not folder.stat().st_mode & stat.S_IXOTH:
            return folder, base
    return None


def _with_python_lent(argv: list[str]) -> list[str]:
    """``argv`` in a private mount namespace where the private folder holding Python is an empty, enterable
    tmpfs with only the Python installation bound back in: the account can run Python, and nothing else of
    that folder shows (nothing changes outside the namespace)."""
    lent = _lent_python()
    if lent is None:
        return argv
    folder, base = lent
    script = (
        'set -e; keep=$(mktemp -d); mount --bind "$2" "$keep"; mount -t tmpfs -o mode=0755 tmpfs "$1"; '
        'mkdir -p "$2"; mount --bind "$keep" "$2"; umount "$keep"; rmdir "$keep"; shift 2; exec "$@"'
    )
    return [
        shutil.which("unshare"),
        "--mount",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        script,
        "lend",
        str(folder),
        str(base),
        *argv,
    ]


class Accounts:
    """Throwaway Unix accounts, each with its own group and a private home; ``delete`` removes them all."""

    def __init__(self):
        self.tag = secrets.token_hex(3)
        self.made: list[str] = []

    def add(self, role: str) -> str:
        name = f"ts_{role}_{self.tag}"
        subprocess.run(
            [shutil.which("useradd"), "--create-home", "--user-group", "--shell", "/bin/sh", name],
            check=True,
            capture_output=True,
            text=True,
        )
        self.made.append(name)
        # Many distributions create homes readable by everyone (UMASK 022); on a shared machine they must not be.
        home(name).chmod(0o700)
        return name

    def delete(self) -> list[str]:
        failed = []
        for name in self.made:
            folder = home(name)
            done = subprocess.run([shutil.which("userdel"), "--remove", name], capture_output=True, text=True)
            if done.returncode == 12:  # the account is gone, its home could not be removed
                shutil.rmtree(folder, ignore_errors=True)
            elif done.returncode != 0:
                failed.append(f"{name}: {done.stderr.strip()}")
        return failed


def home(user: str) -> Path:
    return Path(pwd.getpwnam(user).pw_dir)


def as_user(user: str, *argv: str, cwd: Path | None = None, stdin: str | None = None, check: bool = True):
    """``argv`` run as ``user`` (runuser: their uid, their groups), in ``cwd`` or their home, with a clean environment."""
    env = {
        "HOME": str(home(user)),
        "USER": user,
        "LOGNAME": user,
        "LANG": "C.UTF-8",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        _with_python_lent([shutil.which("runuser"), "-u", user, "--", *argv]),
        cwd=cwd or home(user),
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert done.returncode == 0, f"{user}: {' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def nbgrader(user: str, *args: str, cwd: Path | None = None, check: bool = True):
    return as_user(user, str(Path(sys.executable).parent / "nbgrader"), *args, "--log-level=WARN", cwd=cwd, check=check)


def probe(user: str, attempts: dict[str, tuple[str, Path]]) -> dict[str, str]:
    """Each attempt (``list``/``read``/``write``/``create``/``rename`` of a path) made as ``user``."""
    plan = json.dumps({key: (what, str(path)) for key, (what, path) in attempts.items()})
    return json.loads(as_user(user, sys.executable, "-c", PROBE, plan).stdout)


def answered(released: Path, answers: dict[str, str]):
    """The released notebook with these answer cells filled in (exercise -> source)."""
    nb = read(released)
    for cell in nb.cells:
        if grade_id(cell) in answers:
            cell.source = answers[grade_id(cell)]
    return nbformat.writes(nb) + "\n"


@pytest.fixture
def accounts():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    made = Accounts()
    try:
        yield made
    finally:
        failed = made.delete()
        assert not failed, f"could not delete the test's accounts: {failed}"


@pytest.fixture
def exchange():
    """A fresh exchange root, as the recipe makes it: everyone may write, the sticky bit set."""
    root = Path(tempfile.mkdtemp(prefix="ts-exchange-", dir="/tmp"))  # not $TMPDIR, which may be private
    root.chmod(0o1777)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_class_of_real_accounts_through_the_exchange(accounts, exchange):
    started = time.monotonic()
    inst, stu1, stu2 = accounts.add("inst"), accounts.add("stu1"), accounts.add("stu2")
    bwrap = as_user(
        inst, "bwrap", "--ro-bind", "/", "/", "--unshare-user", "--unshare-pid", "--unshare-net", "true", check=False
    )
    if bwrap.returncode != 0:
        reason = f"bubblewrap cannot create namespaces for an unprivileged user here: {bwrap.stderr.strip()}"
        if os.environ.get("COURSE_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox is required here: {reason}")
        pytest.skip(reason)

    # Step 3: every account names the course and the exchange.
    for user in (inst, stu1, stu2):
        as_user(user, "mkdir", "-p", str(home(user) / ".jupyter"))
        as_user(
            user,
            "sh",
            "-c",
            'cat > "$1"',
            "_",
            str(home(user) / ".jupyter" / "nbgrader_config.py"),
            stdin=USER_CONFIG.format(course_id=COURSE_ID, exchange=exchange),
        )

    # Step 4: the instructor's course folder, private to them.
    course = home(inst) / "transformer-course"
    as_user(inst, "mkdir", "-m", "700", str(course))
    as_user(inst, "mkdir", str(course / "solutions"))
    as_user(inst, "cp", str(ROOT / "nbgrader_config.py"), str(course))
    as_user(inst, "cp", "-r", str(solution_path(NOTEBOOK).parent), str(course / "solutions"))
    as_user(inst, "cp", "-r", str(ROOT / "data"), str(course))

    # Step 5: generate and release; then only a submission's owner (and the instructor) may rename or delete it.
    nbgrader(inst, "generate_assignment", NOTEBOOK, "--force", cwd=course)
    nbgrader(inst, "release_assignment", NOTEBOOK, cwd=course)
    inbound, outbound = exchange / COURSE_ID / "inbound", exchange / COURSE_ID / "outbound" / NOTEBOOK
    assert stat.S_IMODE(inbound.stat().st_mode) == 0o2733 and inbound.owner() == inst
    as_user(inst, "chmod", "+t", str(inbound))

    # Step 6: each student fetches, works in their home, submits; both at once, as in a class. Student 2
    # then also submits their notebook in student 1's name (nbgrader submit --student=...), after student 1.
    solution = read(solution_path(NOTEBOOK))
    every = {e.id: e.points for e in checks_for(NOTEBOOK).exercises}
    answers = {
        stu1: {e: answer_source(solution, e) for e in every},  # the solutions: full marks
        stu2: {"layer_norm": answer_source(solution, "layer_norm")},
    }  # rms_norm left as released
    expected = {stu1: every, stu2: {e: p if e == "layer_norm" else 0 for e, p in every.items()}}
    first_submitted = threading.Event()

    def student_works(student: str) -> None:
        try:
            nbgrader(student, "fetch_assignment", NOTEBOOK, "--course", COURSE_ID)
            mine = home(student) / NOTEBOOK / f"{NOTEBOOK}.ipynb"
            assert mine.owner() == student
            as_user(student, "sh", "-c", 'cat > "$1"', "_", str(mine), stdin=answered(mine, answers[student]))
            nbgrader(student, "submit", NOTEBOOK, "--course", COURSE_ID)
        finally:
            if student == stu1:
                first_submitted.set()
        if student == stu2:
            first_submitted.wait()
            nbgrader(student, "submit", NOTEBOOK, "--course", COURSE_ID, f"--student={stu1}")

    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(student_works, student) for student in (stu1, stu2)]:
            done.result()
    submissions = {path: path.owner() for path in inbound.iterdir()}  # the instructor (root here) may list inbound
    assert sorted(submissions.values()) == sorted([stu1, stu2, stu2])
    (submission,) = [path for path, owner in submissions.items() if owner == stu1]
    (forged,) = [path for path, owner in submissions.items() if owner == stu2 and path.name.startswith(f"{stu1}+")]
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o770 and path.group() == inst for path in submissions)

    # What a student must not reach, tried as student 2 with student 1's (and the instructor's) real paths.
    tried = probe(
        stu2,
        {
            "list the inbound submissions": ("list", inbound),
            "list student 1's submission, by its name": ("list", submission),
            "read student 1's submitted notebook": ("read", submission / f"{NOTEBOOK}.ipynb"),
            "change student 1's submitted notebook": ("write", submission / f"{NOTEBOOK}.ipynb"),
            "rename student 1's submission": ("rename", submission),
            "list student 1's home": ("list", home(stu1)),
            "read student 1's fetched notebook": ("read", home(stu1) / NOTEBOOK / f"{NOTEBOOK}.ipynb"),
            "list the instructor's course folder": ("list", course),
            "read the gradebook": ("read", course / "gradebook.db"),
            "read the source notebook": ("read", course / "solutions" / NOTEBOOK / f"{NOTEBOOK}.ipynb"),
            "change the released notebook": ("write", outbound / f"{NOTEBOOK}.ipynb"),
            "add a file to the release": ("create", outbound / "extra.py"),
        },
    )
    assert set(tried.values()) == {"PermissionError"}, tried

    # Step 7: doctor (as the instructor, from the course folder: every line ok, the exchange's mode the recipe's),
    # collect (without the forged submission), autograde (student code in the sandbox).
    doctor = as_user(inst, sys.executable, "-m", "autograder", "doctor", cwd=course, check=False)
    said = {line.split(":")[0].split()[-1]: line for line in doctor.stdout.splitlines() if ":" in line}
    assert doctor.returncode == 0 and all(
        said[item].startswith("ok") for item in ("sandbox", "worker", "warm", "data", "versions", "exchange")
    ), doctor.stdout
    assert str(exchange) in said["exchange"], doctor.stdout
    collected = nbgrader(inst, "collect", NOTEBOOK, cwd=course)
    assert f"Not collected: {forged} is named as {stu1}'s submission but belongs to {stu2}" in collected.stderr
    assert (course / "submitted" / stu1 / NOTEBOOK / "timestamp.txt").read_text() == (
        submission / "timestamp.txt"
    ).read_text()
    nbgrader(inst, "autograde", NOTEBOOK, cwd=course)
    assert stat.S_IMODE(course.stat().st_mode) == 0o700 and course.owner() == inst  # nbgrader left it private
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        assert {student.id for student in gradebook.students} == {stu1, stu2}
        for student, scores in expected.items():
            graded = gradebook.find_submission_notebook(NOTEBOOK, NOTEBOOK, student)
            assert {answer_id(g.name): g.score for g in graded.grades} == scores

    # After grading, the graded copies and the gradebook stay the instructor's alone.
    for student in (stu1, stu2):
        tried = probe(
            student,
            {
                "list autograded/": ("list", course / "autograded"),
                "read the gradebook": ("read", course / "gradebook.db"),
                "read their own graded notebook": (
                    "read",
                    course / "autograded" / student / NOTEBOOK / f"{NOTEBOOK}.ipynb",
                ),
            },
        )
        assert set(tried.values()) == {"PermissionError"}, (student, tried)
    print(f"\nthe class took {time.monotonic() - started:.1f} s")


# autograder/exchange.py as one user (any user, root too): the two classes on their own, through nbgrader's API.


def _exchange(cls, tmp_path: Path):
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(root=str(tmp_path / "course"), course_id=COURSE_ID, assignment_id=NOTEBOOK)
    return cls(
        coursedir=coursedir,
        authenticator=Authenticator(),
        root=str(tmp_path / "exchange"),
        cache=str(tmp_path / "cache"),
        assignment_dir=str(tmp_path / "work"),
    )


def _submission(inbound: Path, name: str, when: str) -> Path:
    folder = inbound / f"{name}+{NOTEBOOK}+2026-01-0{when} 00:00:00.000000 UTC+{secrets.token_urlsafe(9)}"
    folder.mkdir(parents=True)
    (folder / f"{NOTEBOOK}.ipynb").write_text("{}")
    (folder / "timestamp.txt").write_text(f"2026-01-0{when} 00:00:00.000000 UTC")
    return folder


def test_collect_leaves_out_a_submission_made_in_someone_elses_name(tmp_path, caplog, monkeypatch):
    from autograder.exchange import OwnerCheckedCollect

    monkeypatch.setenv(
        "PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )  # the gradebook runs alembic

    me = pwd.getpwuid(os.getuid()).pw_name
    inbound = tmp_path / "exchange" / COURSE_ID / "inbound"
    _submission(inbound, me, "1")
    _submission(inbound, me, "2")
    forged = _submission(inbound, f"not{me}", "3")  # named for someone else, but mine
    (tmp_path / "course").mkdir()
    collect = _exchange(OwnerCheckedCollect, tmp_path)
    collect.start()
    assert (tmp_path / "course" / "submitted" / me / NOTEBOOK / "timestamp.txt").read_text().startswith("2026-01-02")
    assert not (tmp_path / "course" / "submitted" / f"not{me}").exists()
    assert f"Not collected: {forged} is named as not{me}'s submission but belongs to {me}" in caplog.text


def test_submit_closes_the_submission_to_everyone_but_its_owner_and_the_inbound_group(tmp_path):
    from autograder.exchange import PrivateSubmit

    course = tmp_path / "exchange" / COURSE_ID
    (course / "outbound" / NOTEBOOK).mkdir(parents=True)
    (course / "outbound" / NOTEBOOK / f"{NOTEBOOK}.ipynb").write_text("{}")
    (course / "inbound").mkdir()
    (course / "inbound").chmod(0o2733)  # as release_assignment makes it
    (tmp_path / "work" / NOTEBOOK).mkdir(parents=True)
    (tmp_path / "work" / NOTEBOOK / f"{NOTEBOOK}.ipynb").write_text("{}")
    _exchange(PrivateSubmit, tmp_path).start()
    (submitted,) = (course / "inbound").iterdir()
    assert stat.S_IMODE(submitted.stat().st_mode) == 0o770  # nbgrader's own submit leaves it 0777
    assert (submitted / f"{NOTEBOOK}.ipynb").read_text() == "{}"
