"""Run All goes through a whole untouched notebook (issue 24).

Every untouched course notebook runs top to bottom under nbclient, which, like JupyterLab's Run All,
goes on after an error only in a cell tagged ``raises-exception``: every code cell must run, only the
tagged ones may fail, a demonstration that needs an unfinished exercise says so in one line (no
traceback), and every other cell that draws a picture in the solution draws it here too.
tests/test_run_all_browser.py runs Run All in a real JupyterLab.

The notebooks run as a student's would (no grading mode): with the exercises unfinished, the long
demonstrations stop at once, so most take a few seconds. They are split over classes so that
pytest-xdist's ``--dist loadscope`` spreads them over its workers.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from nbclient import NotebookClient
from notebooks import ROOT, discovered, read, release_path, solution_path

sys.path.insert(0, str(ROOT / "tools"))
import run_all_tags  # noqa: E402

from coursetools import run_all  # noqa: E402

WAITING = run_all_tags.load_waiting()


def test_tags_match_the_committed_list():
    done = subprocess.run([sys.executable, ROOT / "tools" / "run_all_tags.py", "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_notebook_has_a_list_and_calls_the_explainer():
    assert set(WAITING) == set(discovered())
    for notebook in discovered():
        setup = next(c for c in read(solution_path(notebook)).cells if c.id == "setup")
        assert "explain_unfinished()" in setup.source, notebook


def _images(cell) -> bool:
    return any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def run_all_untouched(notebook: str, monkeypatch) -> None:
    # Notebook 13's short training run (not an exercise's) takes 80 steps, 30 s here: 5 prove the same.
    monkeypatch.setenv("COURSE_TINYSTORIES_STEPS", "5")
    path = release_path(notebook)
    nb = read(path)
    start = time.perf_counter()
    # allow_errors=False: an error stops the run, as in JupyterLab, unless the cell carries the tag.
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    print(f"{notebook}: Run All in {time.perf_counter() - start:.1f} s")
    solved = {c.id: c for c in read(solution_path(notebook)).cells}
    waiting = set(WAITING[notebook])
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        assert cell.execution_count, f"{notebook}/{cell.id} did not run"
        errors = _errors(cell)
        if run_all_tags.is_graded_test(cell):
            assert errors and errors[0]["ename"] == "ChecksFailed", f"{notebook}/{cell.id}: {errors}"
        elif cell.id in waiting:
            # the unfinished answer itself, or a name that an earlier waiting cell could not make
            assert [o["ename"] for o in errors] in (["NotImplementedError"], ["NameError"]), f"{notebook}/{cell.id}: {errors}"
            (line,) = errors[0]["traceback"]  # one line, no traceback
            assert line.startswith('This cell waits for "Exercise '), f"{notebook}/{cell.id}: {line}"
            print(f"  {cell.id}: {line}")
        else:
            assert not errors, f"{notebook}/{cell.id} failed"
            if _images(solved[cell.id]):
                assert _images(cell), f"{notebook}/{cell.id} drew no picture"


# loadscope: each class runs on one worker; the split balances their measured times (about 40 s and 50 s
# on a busy 2-core machine, tests/test_run_all_browser.py about 25 s).
class TestRunAllEarly:
    @pytest.mark.parametrize("notebook", ["00_welcome", "01_tokens_embeddings", "02_normalization", "03_rope",
                                          "04_attention", "05_multihead_attention", "06_feed_forward",
                                          "07_blocks"])
    def test_run_all_untouched(self, notebook, monkeypatch):
        run_all_untouched(notebook, monkeypatch)


class TestRunAllLate:
    @pytest.mark.parametrize("notebook", ["08_decoder_models", "09_bert_encoder_decoder",
                                          "10_training", "11_decoding", "12_bpe", "13_tinystories"])
    def test_run_all_untouched(self, notebook, monkeypatch):
        run_all_untouched(notebook, monkeypatch)


def test_the_split_covers_every_notebook():
    marks = [TestRunAllEarly.test_run_all_untouched, TestRunAllLate.test_run_all_untouched]
    covered = [n for m in marks for mark in m.pytestmark if mark.name == "parametrize" for n in mark.args[1]]
    assert sorted(covered) == discovered()


class _Frame:
    def __init__(self, filename, qualname, lineno):
        self.tb_frame = type("F", (), {"f_code": type("C", (), {"co_filename": filename, "co_qualname": qualname,
                                                                 "co_name": qualname})()})()
        self.tb_lineno = lineno
        self.tb_next = None


def test_only_a_stub_line_gets_the_short_message(tmp_path, monkeypatch):
    cell = tmp_path / "ipykernel_1" / "123.py"
    cell.parent.mkdir()
    cell.write_text("class RMSNorm:\n    def forward(self, x):\n        # YOUR CODE HERE\n"
                    "        raise NotImplementedError()\n    def other(self):\n"
                    "        raise NotImplementedError('not a stub')\n")
    assert run_all.stub_name(_Frame(str(cell), "RMSNorm.forward", 4)) == "RMSNorm.forward"
    assert run_all.stub_name(_Frame(str(cell), "RMSNorm.other", 6)) is None  # some other NotImplementedError
    assert run_all.stub_name(_Frame("/site-packages/torch/nn/module.py", "forward", 4)) is None
    monkeypatch.chdir(tmp_path)
    title = run_all.exercise_for("RMSNorm.forward", release_path("02_normalization"))
    assert title and title.startswith("Exercise ")
    assert run_all.message("RMSNorm.forward", title).startswith(f'This cell waits for "{title}": your `RMSNorm.forward`')
