"""course/ is exactly what nbgrader generates from solutions/, and gives nothing away."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
from leaks import MARKERS, leaked, public_text, secret_lines
from notebooks import NOTEBOOKS, ROOT, read, solution_path
from released import every_notebook_released

from coursetools.notebook_vocabulary import is_checkpoint


@pytest.fixture(scope="module")
def fresh_release() -> Path:
    """A release generated now, in a scratch course directory, from the committed sources (every assignment in
    one nbgrader process, shared with the other tests of this process: tests/released.py)."""
    return every_notebook_released().folder / "course"


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not is_checkpoint(p)}


def test_committed_release_matches_a_fresh_generation(fresh_release):
    committed = ROOT / "course"
    assert _files(committed) == _files(fresh_release), "course/ has missing or extra files: run `make release`"
    differing = [f for f in _files(committed) if not filecmp.cmp(committed / f, fresh_release / f, shallow=False)]
    assert not differing, f"course/ is stale for {differing}: run `make release` and commit"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
@pytest.mark.parametrize("kind", MARKERS)
def test_release_holds_no_solution_or_hidden_test_line(notebook, kind):
    """Neither this notebook's release nor an earlier one's shows this notebook's answers.

    (A later notebook may build on an earlier one's answer: notebook 03 draws notebook
    01's sinusoidal table to compare it with RoPE.)
    """
    earlier = sorted(NOTEBOOKS)[: sorted(NOTEBOOKS).index(notebook)]
    shown_before = " ".join(public_text(read(solution_path(folder)), kind) for folder in earlier)
    secrets = secret_lines(read(solution_path(notebook)), kind, shown_before)
    assert secrets, f"found no {kind} lines in {notebook}: is the marker convention still used?"
    released = ""
    for folder in sorted(NOTEBOOKS)[: sorted(NOTEBOOKS).index(notebook) + 1]:
        for path in (ROOT / "course" / folder).rglob("*"):
            if path.is_file():
                released += path.read_text(errors="replace") + "\n"
            if path.suffix == ".ipynb":
                released += "\n".join(cell.source for cell in read(path).cells) + "\n"
    assert not leaked(secrets, released)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_cell_outputs_show_no_solution_line(notebook):
    """What the cells print shows no answer either: a student's graded notebook keeps its outputs, and the feedback
    shows them (notebook 14 prints the course's Triton kernel, which once shared lines with the tiled forward's
    answer). The solution's outputs stand for the student's: the cells that print code print the same code."""
    nb = read(solution_path(notebook))
    printed = "\n".join(
        text
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        for text in (output.get("text", ""), output.get("data", {}).get("text/plain", ""))
    )
    assert not leaked(secret_lines(nb, "solution"), printed)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_leak_detector_finds_the_secrets_in_the_sources(notebook):
    """The search above can fail: run on the instructor's notebook, it finds every line."""
    nb = read(solution_path(notebook))
    source = "\n".join(cell.source for cell in nb.cells)
    for kind in MARKERS:
        secrets = secret_lines(nb, kind)
        assert leaked(secrets, source) == sorted(secrets)
