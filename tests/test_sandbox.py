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
from autograder.grading import is_test_cell

NOTEBOOK = "01_tokens_embeddings"
SOLUTION = read(solution_path(NOTEBOOK))

MALICIOUS_REPLY = '''
import os, pickle, struct, sys
class Payload:
    def __reduce__(self):
        return (os.system, ("touch {marker}",))
frame = pickle.dumps({{"nonce": None, "ok": True, "value": Payload()}})
os.write(int(sys.argv[3]), struct.pack("!Q", len(frame)) + frame)
'''


def _answer(exercise, before="", inside=None):
    source = answer_source(SOLUTION, exercise)
    if inside:
        signature, statement = inside
        source = source.replace(signature, signature + f"        {statement}\n", 1)
    return before + source


def test_misbehaving_code_costs_only_its_exercise(tmp_path):
    marker = tmp_path / "unpickled"
    answers = {
        "embedding": _answer("embedding", inside=(
            "def forward(self, token_ids: torch.Tensor) -> torch.Tensor:\n", "import os; os._exit(0)")),
        "sinusoidal": _answer("sinusoidal") + MALICIOUS_REPLY.format(marker=marker),
        "learned_positions": _answer("learned_positions", inside=(
            "def forward(self, positions: torch.Tensor) -> torch.Tensor:\n", "while True: pass")),
        "input_embedding": _answer("input_embedding", inside=(
            "def forward(self, token_ids: torch.Tensor, start_pos: int = 0) -> torch.Tensor:\n",
            'print("spam " * 1_000_000)')),
    }
    nb = nbformat.v4.new_notebook()
    nb.cells = [c for c in SOLUTION.cells if c.cell_type == "code" and c.get("id") == "setup"]
    for cell in SOLUTION.cells:
        exercise = cell.metadata.get("nbgrader", {}).get("grade_id")
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
        capture_output=True, text=True, timeout=300,
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
        capture_output=True, text=True, timeout=300, env=env,
    )
    return done.returncode, (json.loads(done.stdout) if done.stdout.strip() else None), done.stderr


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
            assert set(entry) == {"id", "passed", "points", "max_points", "message"}
            assert entry["passed"] and entry["points"] == entry["max_points"]


def test_a_notebook_of_no_exercise_gets_one_line_and_exit_2(tmp_path):
    path = tmp_path / "notes.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hello')")]), path)
    status, report, stderr = _cli(path)
    assert (status, report) == (2, None)
    assert stderr.strip().count("\n") == 0 and "not one of this course's notebooks" in stderr, stderr


def test_without_a_sandbox_self_check_still_works_and_says_so(tmp_path):
    """macOS, Binder, a container without user namespaces: grading runs, with the limits it can set."""
    path = _course_folder(tmp_path, "04_attention", read(solution_path("04_attention")))
    status, report, stderr = _cli(path, env=dict(os.environ, AUTOGRADER_BWRAP="/nonexistent/bwrap"))
    assert status == 0, report
    assert report["score"] == report["max_score"]
    assert stderr.count("checking without a sandbox") == 1 and "not installed" in stderr, stderr
    assert "memory and file-size limits still apply" in stderr


def test_grading_runs_say_so_to_the_notebook(tmp_path, monkeypatch):
    """Notebooks cut long demonstrations short when graded (coursetools.budget)."""
    from autograder.sandbox import Limits, Sandbox
    from coursetools.budget import being_graded

    for name in ("COURSE_GRADING", "NBGRADER_EXECUTION"):
        monkeypatch.delenv(name, raising=False)
    assert not being_graded()
    for name, value in Sandbox(tmp_path, None, [], Limits(), enabled=False).environment().items():
        monkeypatch.setenv(name, value)
    assert being_graded()
