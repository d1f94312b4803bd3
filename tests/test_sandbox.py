"""The grading worker contains what student code does to its own process.

One notebook, four answers, each misbehaving differently inside the functions the
checks call; the command-line grader must fail exactly the misbehaving exercises,
say why, and give full marks to the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import nbformat
from notebooks import answer_source, read, solution_path

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
