"""The grading worker contains what student code does to its own process, and the OS sandbox
contains what it does to everything else.

Through the command line: misbehaviour inside the functions the checks call, each attack
of ``attacks.py``, renamed notebooks, and the unsandboxed self-check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import attacks
import nbformat
import pytest
from attacks import ATTACKS
from notebooks import ROOT, answer_source, read, require_sandbox, solution_path, with_answer

from autograder.exercises import checks_for
from autograder.phases import PREFIX
from coursetools.notebook_vocabulary import grade_id, is_test_cell

NOTEBOOK = "01_tokens_embeddings"
SOLUTION = read(solution_path(NOTEBOOK))

MALICIOUS_REPLY = """
import os, pickle, struct, sys
class Payload:
    def __reduce__(self):
        return (os.system, ("touch {marker}",))
frame = pickle.dumps({{"nonce": None, "ok": True, "value": Payload()}})
os.write(int(sys.argv[2]), struct.pack("!Q", len(frame)) + frame)
"""


def _answer(exercise, before="", inside=None):
    source = answer_source(SOLUTION, exercise)
    if inside:
        signature, statement = inside
        source = source.replace(signature, signature + f"        {statement}\n", 1)
    return before + source


def test_misbehaving_code_costs_only_its_exercise(tmp_path):
    marker = tmp_path / "unpickled"
    answers = {
        "embedding": _answer(
            "embedding",
            inside=("def forward(self, token_ids: torch.Tensor) -> torch.Tensor:\n", "import os; os._exit(0)"),
        ),
        "sinusoidal": _answer("sinusoidal") + MALICIOUS_REPLY.format(marker=marker),
        "learned_positions": _answer(
            "learned_positions",
            inside=("def forward(self, positions: torch.Tensor) -> torch.Tensor:\n", "while True: pass"),
        ),
        "input_embedding": _answer(
            "input_embedding",
            inside=(
                "def forward(self, token_ids: torch.Tensor, start_pos: int = 0) -> torch.Tensor:\n",
                'print("spam " * 1_000_000)',
            ),
        ),
    }
    nb = nbformat.v4.new_notebook()
    nb.cells = [c for c in SOLUTION.cells if c.cell_type == "code" and c.get("id") == "setup"]
    for cell in SOLUTION.cells:
        exercise = grade_id(cell)
        if exercise in answers:
            nb.cells.append(nbformat.v4.new_code_cell(answers[exercise], metadata=cell.metadata))
    assert len(nb.cells) == 5 and not any(is_test_cell(c) for c in nb.cells)
    tmp_path.chmod(0o755)  # grading as root runs student code as another user, who must read the course
    path = tmp_path / "course" / NOTEBOOK / f"{NOTEBOOK}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    (tmp_path / "data" / "tinystories").mkdir(parents=True)
    (tmp_path / "data" / "tinystories" / "tinystories_tiny.txt").write_text("Once upon a time.\n")

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "check", str(path), "--json", "--timeout", "4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.monotonic() - started
    report = {e["id"]: e for e in json.loads(done.stdout)["exercises"]}

    assert done.returncode == 1
    assert not report["embedding"]["passed"]
    assert "the Python process running your code ended" in report["embedding"]["message"]
    assert not report["sinusoidal"]["passed"]
    assert "unreadable reply" in report["sinusoidal"]["message"] or "does not belong" in report["sinusoidal"]["message"]
    assert not marker.exists(), "a reply from student code was unpickled"
    assert not report["learned_positions"]["passed"]
    assert "infinite loop" in report["learned_positions"]["message"]
    assert report["input_embedding"]["passed"], report["input_embedding"]["message"]
    # One stuck call stops that exercise's remaining checks instead of timing out on each.
    assert elapsed < 120, f"grading took {elapsed:.0f} s"


# --- the OS sandbox: attacks on the grader, through the command line ---------------------


def _cli(path: Path, *args: str, env: dict | None = None):
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "check", str(path), "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    return done.returncode, (json.loads(done.stdout) if done.stdout.strip() else None), done.stderr


def _besides_phases(stderr: str) -> list[str]:
    """What ``check`` said on stderr, less the phases it says as it goes (``grading: starting Python``...)."""
    return [line for line in stderr.strip().splitlines() if not line.startswith(PREFIX)]


def _course_folder(tmp_path: Path, notebook: str, nb, name: str | None = None) -> Path:
    """``nb`` saved as ``tmp_path/course/<notebook>/<name>.ipynb``, with the course's data beside it."""
    tmp_path.chmod(0o755)  # grading as root runs student code as another user, who must read the course
    path = tmp_path / "course" / notebook / f"{name or notebook}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    shutil.copytree(ROOT / "data" / "tinystories", tmp_path / "data" / "tinystories")
    return path


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_attack_costs_only_its_exercise_and_does_no_harm(attack, tmp_path):
    require_sandbox()
    solution = read(solution_path(attacks.NOTEBOOK))
    harm = attacks.Harm(folder=tmp_path)
    nb = with_answer(solution, attack.exercise, attack.answer(answer_source(solution, attack.exercise), harm))
    path = _course_folder(tmp_path, attacks.NOTEBOOK, nb)

    status, report, stderr = _cli(path, "--max-file-size", attacks.FILE_SIZE_LIMIT, env=harm.environment())

    assert status == 1, stderr[-2000:]
    assert "without a sandbox" not in stderr
    failed = {e["id"]: e["message"] for e in report["exercises"] if not e["passed"]}
    assert set(failed) == {attack.exercise}, failed
    if attack.says:
        assert any(fragment in failed[attack.exercise] for fragment in attack.says), failed[attack.exercise]
    assert harm.check() == []


def test_renamed_copies_grade_like_the_original(tmp_path):
    """JupyterLab's Duplicate (NAME-Copy1.ipynb) or any name: the content says which notebook it is.

    Also the command line's report of a solution: full marks, every exercise in order.
    """
    notebook = "04_attention"
    exercises = checks_for(notebook).exercises
    for name in (f"{notebook}-Copy1", "my_attempt"):
        path = tmp_path / f"{name}.ipynb"
        nbformat.write(read(solution_path(notebook)), path)
        status, report, _ = _cli(path)
        assert status == 0, report
        assert report["notebook"] == notebook
        assert report["score"] == report["max_score"] == sum(e.points for e in exercises)
        assert [e["id"] for e in report["exercises"]] == [e.id for e in exercises]
        for entry in report["exercises"]:
            assert set(entry) == {
                "id",
                "passed",
                "points",
                "max_points",
                "message",
                "state",
                "reason",
                "note",
                "checks",
            }
            assert entry["passed"] and entry["points"] == entry["max_points"]


def test_a_notebook_of_no_exercise_gets_one_line_and_exit_2(tmp_path):
    path = tmp_path / "notes.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hello')")]), path)
    status, report, stderr = _cli(path)
    assert (status, report) == (2, None)
    (line,) = _besides_phases(stderr)
    assert "not one of this course's notebooks" in line, stderr


def test_without_a_sandbox_self_check_still_works_and_says_so(tmp_path):
    """macOS, Binder, a container without user namespaces: grading runs, with the limits it can set."""
    path = _course_folder(tmp_path, "04_attention", read(solution_path("04_attention")))
    status, report, stderr = _cli(path, env=dict(os.environ, AUTOGRADER_BWRAP="/nonexistent/bwrap"))
    assert status == 0, report
    assert report["score"] == report["max_score"]
    assert stderr.count("checking without a sandbox") == 1 and "not installed" in stderr, stderr
    assert "memory and file-size limits still apply" in stderr


def test_grading_runs_say_so_to_the_notebook(tmp_path, monkeypatch):
    """Notebooks cut long demonstrations short when graded (coursetools.grading_run)."""
    from autograder.sandbox import Limits, Sandbox
    from coursetools.grading_run import being_graded

    for name in ("COURSE_GRADING", "NBGRADER_EXECUTION"):
        monkeypatch.delenv(name, raising=False)
    assert not being_graded()
    with Sandbox(tmp_path, None, [], Limits(), enabled=False) as sandbox:
        for name, value in sandbox.environment().items():
            monkeypatch.setenv(name, value)
    assert being_graded()


# --- a cell that behaves differently when replayed; files that would shadow the grader's modules ----------


def replaying_submission(solution, hangs: str, exits: str):
    """``solution`` whose answer ``hangs`` hangs when replayed and whose answer ``exits`` ends its process.

    The exit makes the grader restart the worker and replay the cells that ran, ``hangs`` among them.
    """
    nb = with_answer(solution, hangs, attacks.REPLAYS_DIFFERENTLY + answer_source(solution, hangs))
    return with_answer(nb, exits, answer_source(solution, exits) + "\nimport os\nos._exit(1)\n")


def test_a_cell_that_hangs_when_replayed_costs_only_what_depends_on_it(tmp_path):
    """Every submission gets a report: the failed replay costs the replayed cell's exercise, with why."""
    path = _course_folder(tmp_path, NOTEBOOK, replaying_submission(SOLUTION, "sinusoidal", "learned_positions"))
    status, report, stderr = _cli(path, "--timeout", "4")
    assert status == 1 and report is not None, stderr[-3000:]
    by_id = {e["id"]: e for e in report["exercises"]}
    assert by_id["embedding"]["passed"] and by_id["input_embedding"]["passed"], report
    assert "the Python process running your code ended" in by_id["learned_positions"]["message"]
    said = by_id["sinusoidal"]["message"]
    assert not by_id["sinusoidal"]["passed"]
    assert "when the grader ran it again" in said and "infinite loop" in said, said


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
def test_files_beside_the_notebook_never_run_as_grader_code(tmp_path, sandboxed):
    """A json.py (or traitlets.py, pickle.py, IPython/, autograder/) beside the notebook is not imported by
    the worker as it starts; the student's own module beside the notebook still imports in their cells."""
    if sandboxed:
        require_sandbox()
    solution = read(solution_path(NOTEBOOK))
    nb = with_answer(solution, "embedding", "from mylocal import SCALE\n" + answer_source(solution, "embedding"))
    path = _course_folder(tmp_path, NOTEBOOK, nb)
    for name in attacks.SHADOWED:
        (path.parent / f"{name}.py").parent.mkdir(exist_ok=True)
        (path.parent / f"{name}.py").write_text(attacks.SHADOW.format(name=name))
    (path.parent / "mylocal.py").write_text("SCALE = 1.0\n")
    env = None if sandboxed else dict(os.environ, AUTOGRADER_BWRAP="/nonexistent/bwrap")
    status, report, stderr = _cli(path, env=env)
    assert "grader imported the student file" not in stderr + json.dumps(report)
    assert status == 0 and report["score"] == report["max_score"], (report, stderr[-3000:])


# --- limits that cannot be set, and the scratch copy's clean-up -------------------------------------------

LOW_HARD_FILE_SIZE = ["prlimit", "--fsize=10000000:10000000"]  # below the 1 GB that grading asks for


def test_a_limit_that_cannot_be_set_stops_grading_with_one_line(tmp_path):
    """Sandboxed, no student code runs without its limits: one line that names the limit, exit 2.

    The grader runs under a hard file-size limit below the one it must set; inside the sandbox no
    capability can raise it."""
    require_sandbox()
    path = _course_folder(tmp_path, "02_normalization", read(solution_path("02_normalization")))
    done = subprocess.run(
        [*LOW_HARD_FILE_SIZE, sys.executable, "-m", "autograder", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    (line,) = _besides_phases(done.stderr)
    assert "file size limit (1 GB) could not be set" in line and "hard limit here is 9.5" in line, line


def test_unsandboxed_a_limit_that_cannot_be_set_is_one_warning(tmp_path):
    """A self-check without bubblewrap still grades, and says in one line which limit it could not set.

    As root, setrlimit may raise a hard limit; setpriv takes that capability away, as for any user."""
    path = _course_folder(tmp_path, "02_normalization", read(solution_path("02_normalization")))
    env = dict(os.environ, AUTOGRADER_BWRAP="/nonexistent/bwrap")
    done = subprocess.run(
        [
            "setpriv",
            "--bounding-set=-sys_resource",
            *LOW_HARD_FILE_SIZE,
            sys.executable,
            "-m",
            "autograder",
            "check",
            str(path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["score"] == 6
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "file size limit (1 GB) could not be set" in warnings[0], done.stderr


def _scratch_folders(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("autograder-*"))


def test_the_scratch_copy_is_removed_when_making_it_fails(tmp_path, monkeypatch):
    """A submission that cannot be copied (a named pipe in it), or a chown that fails: nothing is left behind."""
    import tempfile

    from autograder.errors import GradingError
    from autograder.sandbox import Sandbox

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "notes.txt").write_text("fine")
    with Sandbox(folder) as sandbox:  # the control: made, then removed
        assert (sandbox.scratch / "notes.txt").read_text() == "fine"
    assert _scratch_folders(tmp) == []

    os.mkfifo(folder / "pipe")
    with pytest.raises(GradingError, match="could not make the scratch copy"):
        with Sandbox(folder):
            pass
    assert _scratch_folders(tmp) == []
    (folder / "pipe").unlink()

    if os.geteuid() == 0:  # grading as root chowns the copy to the sandbox's own user

        def refuse(*args):
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(os, "lchown", refuse)
        with pytest.raises(GradingError, match="Operation not permitted"):
            with Sandbox(folder):
                pass
        assert _scratch_folders(tmp) == []


def test_a_submission_that_cannot_be_copied_gets_one_line_and_leaves_nothing(tmp_path):
    """Through the command line: exit 2 with one line, and no scratch folder left in TMPDIR."""
    require_sandbox()
    path = _course_folder(tmp_path, "02_normalization", read(solution_path("02_normalization")))
    os.mkfifo(path.parent / "pipe")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    status, report, stderr = _cli(path, env=dict(os.environ, TMPDIR=str(tmp)))
    assert (status, report) == (2, None)
    (line,) = stderr.strip().splitlines()
    assert "could not make the scratch copy" in line and "pipe" in line, line
    assert _scratch_folders(tmp) == []


# --- code that runs out of time: stopped where it is, and not waited for again ------------------------------------


def test_code_that_ran_out_of_time_is_not_waited_for_again(tmp_path):
    """Issue 52 §4: RMSNorm's forward never returns. Notebook 02's demo cells after it call it, and so do the
    exercise's checks; the worker stops it at the time limit, names the line, and every later call into the same
    code fails at once ("was not run again"), instead of costing the whole limit per cell and per check."""
    notebook, seconds = "02_normalization", 3
    solution = read(solution_path(notebook))
    looping = answer_source(solution, "rms_norm").replace(
        "def forward(self, x: torch.Tensor) -> torch.Tensor:\n",
        "def forward(self, x: torch.Tensor) -> torch.Tensor:\n        while True:\n            pass\n",
        1,
    )
    path = _course_folder(tmp_path, notebook, with_answer(solution, "rms_norm", looping))
    from autograder.grading import self_check

    report, _ = self_check(path, timeout=seconds)
    by_id = {result.exercise.id: result for result in report.exercises}
    assert by_id["layer_norm"].passed and not by_id["rms_norm"].passed
    errors = [outcome.error or "" for outcome in report.cells.values()]
    ran_out = [error for error in errors if "did not finish within 3 s (an infinite loop, or far too slow)" in error]
    again = [error for error in errors if error.startswith("was not run again")]
    assert len(ran_out) == 1 and again, errors  # once, then every later demo cell calling it at once
    assert "in forward: `while True:`" in ran_out[0] and "in forward: `while True:`" in again[0], errors
    message = by_id["rms_norm"].message
    assert "was not run again" in message and "not run: an earlier check of this exercise ran out of time" in message
