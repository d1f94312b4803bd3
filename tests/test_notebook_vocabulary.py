"""coursetools.notebook_vocabulary: each rule on small hand-built cells, and a guard that keeps the tree from
spelling the rules again (issue 39 §2)."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from notebooks import ROOT

from coursetools import notebook_vocabulary as vocabulary
from coursetools.notebook_vocabulary import (
    STUB_LINE,
    answer_id,
    course_notebook_paths,
    grade_id,
    is_answer_cell,
    is_checkpoint,
    is_course_notebook_path,
    is_definition_cell,
    is_given_cell,
    is_graded_cell,
    is_locked,
    is_notebook_file,
    is_preamble_cell,
    is_stub_line,
    is_stub_source,
    is_test_cell,
    is_test_id,
    jupyter_answer_id,
    jupyter_test_id,
    nbgrader_meta,
    nbgrader_resources,
    notebook_files,
    points,
    source_text,
    test_id,
)


def _answer(grade: str = "rms_norm", cell_id: str = "ex2-answer") -> dict:
    meta = {"grade": False, "grade_id": grade, "locked": False, "schema_version": 3, "solution": True}
    return {"cell_type": "code", "id": cell_id, "metadata": {"nbgrader": meta}, "source": "", "outputs": []}


def _test(grade: str = "rms_norm_test", cell_id: str = "ex2-test", worth: int = 3) -> dict:
    meta = {"grade": True, "grade_id": grade, "locked": True, "points": worth, "schema_version": 3, "solution": False}
    return {"cell_type": "code", "id": cell_id, "metadata": {"nbgrader": meta}, "source": "", "outputs": []}


def _plain(cell_id: str = "demo", cell_type: str = "code") -> dict:
    return {"cell_type": cell_type, "id": cell_id, "metadata": {}, "source": ""}


def _node(cell: dict):
    """The same cell as nbformat gives it (a NotebookNode, with attribute access)."""
    return nbformat.from_dict(cell)


@pytest.fixture(params=["dict", "node"])
def as_read(request):
    return (lambda cell: cell) if request.param == "dict" else _node


def test_nbgrader_metadata_of_answer_test_and_plain_cells(as_read):
    answer, test, plain = as_read(_answer()), as_read(_test()), as_read(_plain())
    assert nbgrader_meta(answer)["solution"] is True and nbgrader_meta(plain) == {}
    assert nbgrader_meta({"cell_type": "code"}) == {} and nbgrader_meta({"metadata": {"nbgrader": None}}) == {}
    assert (grade_id(answer), grade_id(test), grade_id(plain)) == ("rms_norm", "rms_norm_test", None)
    assert is_answer_cell(answer) and not is_answer_cell(test) and not is_answer_cell(plain)
    assert is_test_cell(test) and not is_test_cell(answer) and not is_test_cell(plain)
    assert is_graded_cell(test) and not is_graded_cell(answer) and not is_graded_cell(plain)
    assert (points(test), points(answer), points(plain)) == (3, 0, 0)
    assert is_locked(test) and not is_locked(answer) and not is_locked(plain)


def test_a_graded_solution_cell_is_an_answer_not_a_test(as_read):
    """nbgrader's "autograded answer" cell (solution and grade): never one of our test cells."""
    both = _answer()
    both["metadata"]["nbgrader"].update(grade=True, points=2)
    cell = as_read(both)
    assert is_answer_cell(cell) and is_graded_cell(cell) and not is_test_cell(cell) and points(cell) == 2


def test_nbgrader_resources():
    assert nbgrader_resources({"nbgrader": {"assignment": "a", "student": "s"}})["student"] == "s"
    assert nbgrader_resources({}) == {} and nbgrader_resources({"nbgrader": None}) == {}


def test_grade_ids_pair_an_answer_with_its_test():
    assert test_id("rms_norm") == "rms_norm_test" and answer_id("rms_norm_test") == "rms_norm"
    assert answer_id(test_id("layer_norm")) == "layer_norm"
    assert answer_id("rms_norm") == "rms_norm"  # not a test id: as it is
    assert is_test_id("rms_norm_test") and not is_test_id("rms_norm") and not is_test_id(None)
    assert is_test_id(grade_id(_test())) and not is_test_id(grade_id(_answer()))


def test_jupyter_cell_ids_pair_an_answer_with_its_test():
    assert jupyter_answer_id("ex2-test") == "ex2-answer" and jupyter_test_id("ex2-answer") == "ex2-test"
    assert jupyter_answer_id("ex2-answer") is None and jupyter_test_id("ex2-test") is None
    assert jupyter_answer_id(None) is None and jupyter_answer_id("setup") is None and jupyter_test_id("") is None


def test_the_preamble_and_the_given_cells(as_read):
    """The preamble (run before the answers when a notebook's definitions are loaded) = context + given cells;
    the export takes only the given ones."""
    for cell_id in ("configs", "config-train", "config-bert", "cached-block"):
        cell = as_read(_plain(cell_id))
        assert is_given_cell(cell) and is_preamble_cell(cell) and is_definition_cell(cell), cell_id
    for cell_id in ("setup", "earlier"):
        cell = as_read(_plain(cell_id))
        assert is_preamble_cell(cell) and is_definition_cell(cell) and not is_given_cell(cell), cell_id
    for cell_id in ("demo", "configuration-picture", "setup-2", None):
        cell = as_read(_plain(cell_id))
        assert not is_preamble_cell(cell) and not is_given_cell(cell) and not is_definition_cell(cell), cell_id
    assert not is_preamble_cell(as_read(_plain("setup", cell_type="markdown")))
    assert not is_given_cell(as_read(_plain("configs", cell_type="markdown")))
    assert is_definition_cell(as_read(_answer())) and not is_definition_cell(as_read(_test()))


def test_the_preamble_of_the_course_notebooks():
    """What the rule picks in solutions/: every context cell, and the given cells the docstrings name."""
    given, context = set(), set()
    for path in course_notebook_paths(ROOT / "solutions"):
        cells = nbformat.read(path, as_version=4).cells
        given |= {(path.parent.name, c.id) for c in cells if is_given_cell(c)}
        context |= {(path.parent.name, c.id) for c in cells if is_preamble_cell(c) and not is_given_cell(c)}
    assert ("08_decoder_models", "configs") in given and ("10_training", "config-train") in given
    assert ("11_decoding", "cached-block") in given
    assert {cell_id for _, cell_id in context} == {"setup", "earlier"}


def test_the_stub():
    assert STUB_LINE == "raise NotImplementedError()"
    stub = f"def forward(self, x):\n    # YOUR CODE HERE\n    {STUB_LINE}\n"
    assert is_stub_source(stub) and is_stub_source(stub.splitlines(keepends=True))
    assert not is_stub_source("def forward(self, x):\n    return x\n")
    assert not is_stub_source("raise NotImplementedError('a message')")
    assert is_stub_line(f"        {STUB_LINE}\n") and not is_stub_line("raise NotImplementedError('no')")
    assert source_text(["a\n", "b"]) == "a\nb" and source_text("ab") == "ab"


def test_which_files_are_course_notebooks(tmp_path):
    assert is_course_notebook_path("course/02_normalization/02_normalization.ipynb")
    assert is_course_notebook_path(Path("/x/solutions/13_tinystories/13_tinystories.ipynb"))
    for other in [
        "course/04_attention/04_attention-Copy1.ipynb",  # JupyterLab's Duplicate
        "course/04_attention/.ipynb_checkpoints/04_attention-checkpoint.ipynb",
        "course/04_attention/.ipynb_checkpoints/04_attention.ipynb",
        "course/04_attention/04_attention.py",
        "course/mine/mine.ipynb",  # not NN_name
        "course/04_attention/notes.ipynb",
    ]:
        assert not is_course_notebook_path(other), other
    assert is_notebook_file("course/04_attention/04_attention-Copy1.ipynb")
    assert not is_notebook_file("course/04_attention/.ipynb_checkpoints/04_attention-checkpoint.ipynb")
    assert is_checkpoint("a/.ipynb_checkpoints/b.ipynb") and not is_checkpoint("a/b.ipynb")
    for name in [
        "02_normalization/02_normalization.ipynb",
        "02_normalization/02_normalization-Copy1.ipynb",
        "02_normalization/.ipynb_checkpoints/02_normalization-checkpoint.ipynb",
        ".ipynb_checkpoints/x-checkpoint.ipynb",
        "01_tokens_embeddings/01_tokens_embeddings.ipynb",
    ]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    assert [str(p.relative_to(tmp_path)) for p in notebook_files(tmp_path)] == [
        "01_tokens_embeddings/01_tokens_embeddings.ipynb",
        "02_normalization/02_normalization-Copy1.ipynb",
        "02_normalization/02_normalization.ipynb",
    ]
    assert [p.parent.name for p in course_notebook_paths(tmp_path)] == ["01_tokens_embeddings", "02_normalization"]


def test_the_course_notebooks_are_found():
    from autograder.notebooks import NOTEBOOKS

    assert [p.parent.name for p in course_notebook_paths(ROOT / "solutions")] == sorted(NOTEBOOKS)
    assert [p.parent.name for p in course_notebook_paths(ROOT / "course")] == sorted(NOTEBOOKS)


def test_the_module_is_light():
    """Imported in every kernel, grading worker and tool: neither torch nor nbformat at import."""
    source = Path(vocabulary.__file__).read_text()
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert not imported & {"torch", "nbformat", "autograder"}, imported


# ---------------------------------------------------------------------------------------------------------------
# The guard: nobody reads nbgrader's metadata or spells the stub line but the vocabulary module.

GUARDED = ("autograder", "coursetools", "tools", "tests", "tinystories")
EXEMPT = {
    "coursetools/notebook_vocabulary.py",  # the one place
    "tests/test_notebook_vocabulary.py",  # this guard, and its proof below
}
# Owned by another line of work (the TinyStories program and its tests), which still reads the metadata and spells
# the stub itself: to move to coursetools.notebook_vocabulary there, then to leave this list.
NOT_YET: set[str] = set()


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or bare string statements: prose, not behaviour."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def vocabulary_spelled(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, what) for each place ``source`` reads nbgrader metadata (``"nbgrader"`` as a subscript key or as
    the key of a ``.get``/``.setdefault``/``.pop``) or spells the stub line in code (docstrings and comments are
    prose, and may)."""
    tree = ast.parse(source, filename)
    prose = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "nbgrader":
            found.append((node.lineno, 'reads ["nbgrader"]'))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "setdefault", "pop")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "nbgrader"
        ):
            found.append((node.lineno, f'reads .{node.func.attr}("nbgrader")'))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and STUB_LINE in node.value
            and id(node) not in prose
        ):
            found.append((node.lineno, f"spells {STUB_LINE!r}"))
    return sorted(found)


def _guarded_files() -> list[str]:
    files = []
    for folder in GUARDED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative in EXEMPT or relative in NOT_YET:
                continue
            files.append(relative)
    return files


def test_nothing_but_the_vocabulary_reads_nbgrader_metadata_or_spells_the_stub():
    files = _guarded_files()
    assert "autograder/grading.py" in files and "tools/stamp.py" in files and "tests/notebooks.py" in files
    found = [
        f"{relative}:{line}: {what}"
        for relative in files
        for line, what in vocabulary_spelled((ROOT / relative).read_text(encoding="utf-8"), relative)
    ]
    assert not found, "use coursetools.notebook_vocabulary instead:\n" + "\n".join(found)


def test_the_exemptions_are_still_needed():
    """An exempt file that no longer spells the vocabulary leaves the list (so that it is guarded again)."""
    for relative in sorted(NOT_YET):
        path = ROOT / relative
        if path.exists():
            assert vocabulary_spelled(path.read_text(encoding="utf-8"), relative), f"{relative}: drop it from NOT_YET"


@pytest.mark.parametrize(
    "source",
    [
        'cell.metadata.get("nbgrader", {}).get("grade_id")',
        'cell.get("metadata", {}).get("nbgrader", {})',
        'cell.metadata["nbgrader"]["points"]',
        'cell["metadata"]["nbgrader"]',
        'resources.get("nbgrader", {})',
        'STUB = "raise NotImplementedError()"',
        'ok = "raise NotImplementedError()" in cell.source',
        'text = ("still says raise "\n        "NotImplementedError()")',
    ],
)
def test_the_guard_finds_a_spelled_read(source):
    """The guard can fail: each of these, added to any guarded file, is reported with its line."""
    assert vocabulary_spelled(f"import x\n{source}\n") == [(2, vocabulary_spelled(source)[0][1])]


@pytest.mark.parametrize(
    "source",
    [
        '"""A docstring may say raise NotImplementedError()."""',
        "# a comment may say raise NotImplementedError()",
        'path = ROOT / "bin" / "nbgrader"',
        'command = ["nbgrader", "autograde"]',
        "meta = nbgrader_meta(cell)",
        "raise NotImplementedError()",  # code that raises, not a string spelling the stub
    ],
)
def test_the_guard_leaves_other_uses_alone(source):
    assert vocabulary_spelled(source) == []


def test_coursetools_never_imports_the_grader():
    """The layers go one way: the notebook vocabulary below both, the student's helpers (coursetools) beside the
    grader, never calling into it (a progress button runs `python -m autograder progress` as a command)."""
    import ast

    found = []
    for path in sorted((ROOT / "coursetools").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}:{node.lineno} {name}" for name in names if name.split(".")[0] == "autograder"]
    assert not found, found


def test_an_exercises_heading_gives_its_title():
    from coursetools.notebook_vocabulary import exercise_heading, heading_title

    cells = [
        {"cell_type": "markdown", "source": "### Exercise 2 — RMSNorm in float32  (difficulty ★★☆ 2/3 · about 10 min)"},
        {"cell_type": "markdown", "source": "Some text."},
        {"cell_type": "code", "source": "### BEGIN SOLUTION\n"},
    ]
    assert exercise_heading(cells, 2) == 0 and exercise_heading(cells, 0) is None
    assert heading_title(cells[0]["source"]) == "Exercise 2: RMSNorm in float32"
