"""Run All goes through a whole untouched notebook (issue 24): the cheap half, without running notebooks.

The ``raises-exception`` tags match the committed list of demonstrations that wait for an exercise,
every notebook's setup cell calls the explainer, and only a stub's own ``raise NotImplementedError()``
gets the one-line message. tests/test_run_all_browser.py runs Run All on every untouched notebook
in a real JupyterLab and checks what each cell did.
"""

from __future__ import annotations

import subprocess
import sys

from notebooks import ROOT, discovered, read, release_path, solution_path

sys.path.insert(0, str(ROOT / "tools"))
import run_all_tags  # noqa: E402

from coursetools import run_all  # noqa: E402
from coursetools.notebook_vocabulary import STUB_LINE  # noqa: E402

WAITING = run_all_tags.load_waiting()


def test_tags_match_the_committed_list():
    done = subprocess.run(
        [sys.executable, ROOT / "tools" / "run_all_tags.py", "--check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_notebook_has_a_list_and_calls_the_explainer():
    assert set(WAITING) == set(discovered())
    for notebook in discovered():
        setup = next(c for c in read(solution_path(notebook)).cells if c.id == "setup")
        assert "explain_unfinished()" in setup.source, notebook


class _Frame:
    def __init__(self, filename, qualname, lineno):
        self.tb_frame = type(
            "F",
            (),
            {"f_code": type("C", (), {"co_filename": filename, "co_qualname": qualname, "co_name": qualname})()},
        )()
        self.tb_lineno = lineno
        self.tb_next = None


def test_only_a_stub_line_gets_the_short_message(tmp_path, monkeypatch):
    cell = tmp_path / "ipykernel_1" / "123.py"
    cell.parent.mkdir()
    cell.write_text(
        "class RMSNorm:\n    def forward(self, x):\n        # YOUR CODE HERE\n"
        f"        {STUB_LINE}\n    def other(self):\n"
        "        raise NotImplementedError('not a stub')\n"
    )
    assert run_all.stub_name(_Frame(str(cell), "RMSNorm.forward", 4)) == "RMSNorm.forward"
    assert run_all.stub_name(_Frame(str(cell), "RMSNorm.other", 6)) is None  # some other NotImplementedError
    assert run_all.stub_name(_Frame("/site-packages/torch/nn/module.py", "forward", 4)) is None
    monkeypatch.chdir(tmp_path)
    title = run_all.exercise_for("RMSNorm.forward", release_path("02_normalization"))
    assert title and title.startswith("Exercise ")
    assert run_all.message("RMSNorm.forward", title).startswith(
        f'This cell waits for "{title}": your `RMSNorm.forward`'
    )
