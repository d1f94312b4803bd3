"""Every notebook follows the course's conventions, so the autograder can rely on them."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import nbformat
import pytest
from nbgrader.nbgraderformat import MetadataValidator
from notebooks import NOTEBOOKS, ROOT, discovered, read, release_path, solution_path

from autograder.exercises import Exercise, NotebookChecks, checks_for
from autograder.notebooks import NOTEBOOKS as REGISTERED
from coursetools.notebook_vocabulary import (
    CONTEXT_CELLS,
    grade_id,
    is_answer_cell,
    is_locked,
    is_stub_source,
    is_test_cell,
    jupyter_answer_id,
    jupyter_test_id,
    points,
)

_spec = importlib.util.spec_from_file_location("stamp_tool", ROOT / "tools" / "stamp.py")
stamp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stamp)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_metadata_is_valid_for_nbgrader(notebook):
    nb = read(solution_path(notebook))
    nbformat.validate(nb)
    MetadataValidator().validate_nb(nb)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_no_widget_state_in_the_notebooks(notebook):
    """Re-executing a notebook (make outputs) can store the widgets' state in its metadata, hundreds of lines that
    nbgrader then copies into the release; neither the solution nor the released notebook keeps it."""
    for path in (solution_path(notebook), release_path(notebook)):
        assert "widgets" not in read(path).metadata, f"{path}: its metadata holds widget state; remove it"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_each_exercise_has_an_answer_cell_then_its_test_cell(notebook):
    nb = read(solution_path(notebook))
    answers = {grade_id(c): i for i, c in enumerate(nb.cells) if is_answer_cell(c)}
    tests = {grade_id(c): i for i, c in enumerate(nb.cells) if is_test_cell(c)}
    exercises = checks_for(notebook).exercises
    assert list(answers) == [e.id for e in exercises], "answer cells and registered exercises differ"
    assert list(tests) == [e.test_cell_id for e in exercises], "test cells and registered exercises differ"
    for exercise in exercises:
        index = tests[exercise.test_cell_id]
        assert index > answers[exercise.id], f"{exercise.test_cell_id} comes before its answer cell"
        assert is_locked(nb.cells[index]) and points(nb.cells[index]) == exercise.points
        assert nb.cells[index].source == stamp.test_cell_source(exercise.id)
        assert all(c.cell_type == "markdown" for c in nb.cells[answers[exercise.id] + 1 : index]), (
            "only explanations may stand between an answer cell and its test cell"
        )
        # the test cell finds its answer cell's source by these ids (coursetools.cell_sources)
        assert jupyter_answer_id(nb.cells[index].id), nb.cells[index].id
        assert nb.cells[answers[exercise.id]].id == jupyter_answer_id(nb.cells[index].id)
        assert jupyter_test_id(nb.cells[answers[exercise.id]].id) == nb.cells[index].id


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_earlier_parts_are_in_the_context_cell(notebook):
    """The cell that loads the earlier notebooks' parts (``use_earlier``) is the context cell of that name, so
    whatever loads this notebook's definitions on their own (``load_from_notebook``, the grader's definitions)
    runs it before the answer cells that build on those parts."""
    cells = read(solution_path(notebook)).cells
    loading = [c.get("id") for c in cells if c.cell_type == "code" and "use_earlier(" in c.source]
    assert set(loading) <= {"earlier"} and "earlier" in CONTEXT_CELLS, loading


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_no_raw_cells(notebook):
    """The wrong versions live in tests/wrong, not in the notebook: a raw cell (the old TOML form, or a note for
    maintainers) would reach the release, and students would read it."""
    nb = read(solution_path(notebook))
    assert not [cell.id for cell in nb.cells if cell.cell_type == "raw"], "raw cells in a solution notebook"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_notebook_teaches_in_the_course_style(notebook):
    nb = read(solution_path(notebook))
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "you will be able to" in markdown.lower(), "learning objectives at the top"
    assert "## Summary" in markdown
    assert len(re.findall(r"### Exercise \d+ .*difficulty .*[123]/3 .*about \d+ min", markdown)) == len(
        checks_for(notebook).exercises
    ), "each exercise states a difficulty (1-3) and a time estimate"
    figures = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert figures >= 2, "pictures, with their outputs committed"
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert not any(re.search(r"^\s*[%!]", line, re.M) for line in code), "no IPython magics"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_release_has_stubs_and_no_outputs(notebook):
    nb = read(release_path(notebook))
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    answers = [c for c in nb.cells if is_answer_cell(c)]
    assert answers and all(is_stub_source(c.source) for c in answers)


def test_exercise_ids_are_unique_across_the_course():
    """The grader recognises a notebook by its exercise ids, whatever the file is called."""
    from autograder.grading import identify

    ids = [e.id for notebook in REGISTERED for e in checks_for(notebook).exercises]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert sorted(REGISTERED) == discovered(), "every notebook in solutions/ needs its module in autograder/notebooks"
    for notebook in REGISTERED:
        assert identify(read(release_path(notebook))) == notebook


def test_identifying_a_notebook_imports_no_notebooks_checks():
    """``identify`` reads the exercise declarations, not the check modules: grading notebook 04 must not import
    notebook 10's checks, whose oracles (transformers, peft) took 6 s to import in every grading process."""
    script = (
        "import sys\n"
        "from autograder.grading import identify\n"
        "from autograder.notebook_format import nbformat\n"
        f"assert identify(nbformat.read({str(release_path('04_attention'))!r}, as_version=4)) == '04_attention'\n"
        "print(sorted(m for m in sys.modules if m.startswith('autograder.notebooks.nb')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_every_figure_of_the_solutions_describes_itself():
    """No figure in the committed outputs has only the generic alt text: each has a title or axis labels, or
    describes itself through its figure label (coursetools.figures.describe_figure)."""
    generic = "Figure without a title or axis labels"
    found = [
        f"{name} cell {cell.get('id')}"
        for name in NOTEBOOKS
        for cell in read(solution_path(name)).cells
        for output in cell.get("outputs", [])
        if generic in str(output.get("metadata", {}))
    ]
    assert not found, f"figures described only as {generic!r}: {found}"


def _assigned_literal(source: str, name: str):
    """The value of `NAME = <literal>` at the top level of a cell's source."""
    import ast

    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name} = ... in the cell")


def test_the_course_map_draws_what_the_notebooks_load():
    """Notebook 00's map draws a solid arrow from each notebook whose code a later one runs: through use_earlier or
    load_from_notebook in a later notebook, or through the capstone's training program (tinystories.stack.PARTS)."""
    from tinystories.stack import PARTS

    loaded = {
        (match.group(1), name[:2])
        for name in NOTEBOOKS
        for cell in read(solution_path(name)).cells
        if cell.cell_type == "code"
        for match in re.finditer(r"(?:use_earlier|load_from_notebook)\(\s*\"(\d\d)_", cell.source)
        if match.group(1) != name[:2]
    }
    loaded |= {(part.notebook[:2], "13") for part in PARTS if not part.notebook.startswith("13")}
    course_map = next(c for c in read(solution_path("00_welcome")).cells if c.get("id") == "course-map")
    drawn = set(_assigned_literal(course_map.source, "LOADS_YOUR_CODE"))
    assert drawn == loaded, (
        f"drawn but not loaded: {sorted(drawn - loaded)}; loaded but not drawn: {sorted(loaded - drawn)}"
    )


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_notebook_is_stamped_from_its_declarations(notebook):
    """What the declarations determine (ids, points, test cells, tags, the headings' numbers) is in the notebook as
    tools/stamp.py writes it: a cell edited by hand, or a declaration changed without `make stamp`, is named."""
    nb = json.loads(solution_path(notebook).read_text(encoding="utf-8"))
    changes, problems = stamp.stamp(nb, notebook)
    assert not problems, problems
    assert not changes, f"run `make stamp`: {changes}"


# The stamp's own tests declare two exercises of their own (a notebook "two_norms"), so that a notebook's real
# exercises can change (an exercise added to 02) without changing these tests.
TWO_NORMS = NotebookChecks(
    "two_norms", [Exercise("layer_norm", "LayerNorm", points=3), Exercise("rms_norm", "RMSNorm", points=2)], __name__
)


@pytest.fixture
def two_norms(monkeypatch):
    monkeypatch.setattr(stamp, "checks_for", {"two_norms": TWO_NORMS}.__getitem__)
    return TWO_NORMS


def _exercise_notebook(*cells):
    return {"cells": [dict(cell) for cell in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _markdown(cell_id, text):
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def _code(cell_id, text):
    return {"cell_type": "code", "execution_count": None, "id": cell_id, "metadata": {}, "outputs": [], "source": text}


def test_stamping_a_new_exercise_writes_everything_but_its_teaching(two_norms):
    """An author writes a heading and an answer cell; the stamp writes the rest from the declaration (the two
    exercises of TWO_NORMS here), and renumbers what follows a new exercise."""
    answer = "class LayerNorm:\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION\n"
    nb = _exercise_notebook(
        _markdown("a", "### Exercise 7 — LayerNorm  (difficulty ★★☆ 2/3 · about 15 min)"),
        _code("b", answer),
        _markdown("c", "### Exercise 1 — RMSNorm  (difficulty ★★☆ 2/3 · about 10 min)"),
        _code("d", answer.replace("LayerNorm", "RMSNorm")),
        _markdown("e", "More text."),
    )
    changes, problems = stamp.stamp(nb, "two_norms")
    assert not problems and changes
    ids = [cell["id"] for cell in nb["cells"]]
    assert ids == ["ex1", "ex1-answer", "ex1-test", "ex2", "ex2-answer", "ex2-test", "e"]
    first, second = two_norms.exercises
    assert nb["cells"][0]["source"].startswith("### Exercise 1 — LayerNorm")
    assert nb["cells"][3]["source"].startswith("### Exercise 2 — RMSNorm")
    test = nb["cells"][2]
    assert test["source"] == stamp.test_cell_source(first.id) and "raises-exception" in test["metadata"]["tags"]
    assert (grade_id(test), points(test), is_locked(test)) == (f"{first.id}_test", first.points, True)
    assert grade_id(nb["cells"][4]) == second.id and is_answer_cell(nb["cells"][4])
    assert stamp.stamp(nb, "two_norms") == ([], []), "a stamped notebook is stamped again to itself"


def test_a_new_exercise_before_a_demo_keeps_the_demo(two_norms):
    """The code cell after a new answer cell is the notebook's own (a demo, with only text between) unless it is a
    test cell: the stamp inserts the test cell and never writes over the demo."""
    answer = "class LayerNorm:\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION\n"
    demo = "print(LayerNorm(8)(torch.randn(2, 8)))\n"
    nb = _exercise_notebook(
        _markdown("a", "### Exercise 1 — LayerNorm  (difficulty ★★☆ 2/3 · about 15 min)"),
        _code("b", answer),
        _markdown("c", "## A section\n\nIts demo:"),
        _code("d", demo),
        _markdown("e", "### Exercise 2 — RMSNorm  (difficulty ★★☆ 2/3 · about 10 min)"),
        _code("f", answer.replace("LayerNorm", "RMSNorm")),
        _code("g", stamp.test_cell_source("some_other_exercise")),  # a test cell written by hand, or moved: reused
    )
    changes, problems = stamp.stamp(nb, "two_norms")
    assert not problems and changes
    assert [cell["id"] for cell in nb["cells"]] == [
        "ex1",
        "ex1-answer",
        "ex1-test",
        "c",
        "d",
        "ex2",
        "ex2-answer",
        "ex2-test",
    ]
    assert nb["cells"][4]["source"] == demo and not is_test_cell(nb["cells"][4])
    assert nb["cells"][7]["source"] == stamp.test_cell_source(two_norms.exercises[1].id)


def test_a_notebook_and_its_declarations_that_disagree_are_named(two_norms):
    nb = _exercise_notebook(_code("x", "### BEGIN SOLUTION\n"))
    changes, problems = stamp.stamp(nb, "two_norms")
    assert problems == [
        "two_norms: 1 answer cells (### BEGIN SOLUTION) but 2 exercises declared in autograder/notebooks: "
        "declare each answer cell's exercise, in order"
    ]
    nb = _exercise_notebook(_code("x", "### BEGIN SOLUTION\n"), _code("y", "### BEGIN SOLUTION\n"))
    changes, problems = stamp.stamp(nb, "two_norms")
    assert any("no '### Exercise 1 ...' heading" in p for p in problems)
