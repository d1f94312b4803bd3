"""``python -m autograder progress``: every notebook of a course folder graded as ``check`` grades it.

A temporary course folder holds the released notebooks 01, 02 and 06 (the cheapest to grade):
01 answered from the solutions, 02 with a wrong LayerNorm and the solution's RMSNorm, 06 untouched;
besides them an unreadable file and a notebook of no exercise. The expected scores come from the
checks' points and how each notebook was filled in, not from the grader.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from notebooks import autograder_as_it_goes, release_path
from test_nbgrader_e2e import Student, points, submission, wrong

from autograder import parallel, progress_cache
from autograder import progress as progress_module
from autograder.__main__ import main
from autograder.exercises import checks_for
from autograder.notebooks import NOTEBOOKS
from autograder.progress import Progress, Row, progress
from coursetools.notebook_vocabulary import is_answer_cell, is_test_cell

FILLED = {
    "01_tokens_embeddings": Student({}, set()),
    "02_normalization": Student({"layer_norm": wrong("02_normalization", "layer_norm")}, {"layer_norm"}),
    "06_feed_forward": Student(None, set(points("06_feed_forward"))),
}


def _fingerprint(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file's SHA-256 and modification time (ns)."""
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("student")
    root.chmod(0o755)  # graded as root, student code runs as another user, who must read the course
    folder = root / "course"
    for notebook, student in FILLED.items():
        (folder / notebook).mkdir(parents=True)
        nbformat.write(
            submission(nbformat.read(release_path(notebook), as_version=4), notebook, student),
            folder / notebook / f"{notebook}.ipynb",
        )
    (folder / "06_feed_forward" / "notes.ipynb").write_text("{not a notebook")
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]),
        folder / "02_normalization" / "scratch.ipynb",
    )
    return folder


@pytest.fixture(scope="module")
def serial(course) -> tuple[dict, dict, dict, list[tuple[float, str]]]:
    """The command line's JSON with one worker, the folder's fingerprint before and after, and each line it said
    on stderr with the seconds since it started."""
    before = _fingerprint(course)
    status, out, said, _ = autograder_as_it_goes("progress", str(course), "--workers", "1", "--json")
    assert status == 0, said[-20:]
    return json.loads(out), before, _fingerprint(course), said


def test_scores_per_notebook_and_exercise(serial):
    report, _, _, _ = serial
    rows = {row["path"]: row for row in report["notebooks"]}
    for notebook, student in FILLED.items():
        row = rows[f"{notebook}/{notebook}.ipynb"]
        expected = {e: p * (e not in student.zero) for e, p in points(notebook).items()}
        assert row["status"] == "graded"
        assert {e["id"]: e["points"] for e in row["exercises"]} == expected
        assert (row["score"], row["max_score"]) == (sum(expected.values()), sum(points(notebook).values()))
        titles = [e.title for e in checks_for(notebook).exercises]
        assert [e["title"] for e in row["exercises"]] == titles
    for notebook in set(NOTEBOOKS) - set(FILLED):
        row = rows[f"{notebook}/{notebook}.ipynb"]
        assert (row["status"], row["score"]) == ("missing", 0) and "missing" in row["message"]
    assert rows["06_feed_forward/notes.ipynb"]["status"] == "unreadable"
    assert rows["02_normalization/scratch.ipynb"]["status"] == "unknown"
    assert report["score"] == sum(row["score"] for row in report["notebooks"]) == 10 + 3
    assert report["max_score"] == sum(sum(points(n).values()) for n in NOTEBOOKS)


def test_notebooks_are_never_modified(serial):
    _, before, after, _ = serial
    assert after == before


def test_it_says_each_notebook_as_it_is_graded(serial):
    """A line per notebook on stderr as each is graded, long before the table: grading all takes minutes."""
    report, _, _, said = serial
    rows = [(seconds, line) for seconds, line in said if line.startswith("[")]
    total = len(report["notebooks"])
    assert [line.split("]")[0] for _, line in rows] == [f"[{n}/{total}" for n in range(1, total + 1)], said
    expected = sorted(
        f"{row['notebook']}: {row['score']}/{row['max_score']} points"
        if row["status"] == "graded"
        else f"{row['notebook']}: {row['message'] or row['status']}"
        for row in report["notebooks"]
    )
    assert sorted(line.split("] ", 1)[1] for _, line in rows) == expected, said
    assert rows[0][0] < rows[-1][0] - 5, "the first line came only at the end"


def test_parallel_gives_the_serial_result(course, serial):
    assert progress(course, workers=2, fresh=True).to_json() == serial[0]  # fresh: grade, not read the cache


def rows_by_path(report: dict) -> dict:
    return {row["path"]: row for row in report["notebooks"]}


def test_table_has_a_line_per_notebook_and_a_total(serial):
    report = serial[0]
    rows = [Row(**row) for row in report["notebooks"]]
    table = Progress(report["course"], rows).table().splitlines()
    lines = [text for text in table if not text.startswith(" ")]
    assert len(lines) == 1 + len(rows) + 1
    line = {text.split()[0]: text for text in lines[1:-1]}
    assert line["01_tokens_embeddings"].split()[1:3] == ["10/10", "✓✓✓✓"]
    assert line["01_tokens_embeddings"].endswith("all passed")
    assert line["02_normalization"].split()[1:3] == ["3/6", "✗✓"]
    assert line["02_normalization"].endswith("1 of 2 passed")
    # Under a notebook under way, each unfinished exercise with the first line of why (the wrong LayerNorm's).
    below = table[table.index(line["02_normalization"]) + 1]
    layer_norm = next(
        e
        for e in rows_by_path(report)["02_normalization/02_normalization.ipynb"]["exercises"]
        if e["id"] == "layer_norm"
    )
    assert below == f"    {checks_for('02_normalization').exercises[0].title}: failing: {layer_norm['reason']}"
    assert layer_norm["state"] == "failing" and layer_norm["reason"] and "\n" not in layer_norm["reason"]
    assert line["06_feed_forward"].endswith("not started")  # untouched: one word, no line per exercise
    assert not table[table.index(line["06_feed_forward"]) + 1].startswith(" ")
    assert line["03_rope"].split()[1] == "-" and "missing" in line["03_rope"]
    assert lines[-1].split() == ["total", f"13/{report['max_score']}"]


def test_a_missing_course_folder_is_one_line(tmp_path, capsys):
    assert main(["progress", str(tmp_path / "nowhere")]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.count("\n") == 1 and "no course folder" in said.err


@pytest.mark.parametrize(
    ("cpus", "memory_gb", "expected"),
    [
        (2, 20, 1),  # this machine: the other core stays with JupyterLab
        (16, 64, 8),
        (16, 2, 1),  # Binder: a many-core host, 2 GB for the student
        (16, 5, 3),
        (1, 8, 1),
    ],
)
def test_default_workers_takes_half_the_cores_as_memory_allows(monkeypatch, cpus, memory_gb, expected):
    monkeypatch.setattr(parallel, "usable_cpus", lambda: cpus)
    monkeypatch.setattr(parallel, "available_memory", lambda: memory_gb * 2**30)
    assert parallel.default_workers() == expected
    assert parallel.default_workers(share=1.0) == min(cpus, int(memory_gb * 2**30 // parallel.GRADING_MEMORY))


def test_a_cgroup_cpu_quota_caps_the_cores(monkeypatch):
    files = {"/sys/fs/cgroup/cpu.max": "150000 100000"}
    monkeypatch.setattr(parallel, "_read", files.get)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _: set(range(64)))
    assert parallel.usable_cpus() == 1
    files["/sys/fs/cgroup/cpu.max"] = "max 100000"
    assert parallel.usable_cpus() == 64
    assert parallel.threads_per_grading(8) == 8 and parallel.threads_per_grading(128) == 1


# --- The results kept between runs (autograder.progress_cache). These tests come last: they edit the course.


def _graded_paths(monkeypatch) -> list[str]:
    """Records which notebooks get graded; each grading is a stand-in row, so nothing costs a real grading."""
    graded = []

    def grade_row(path, course, timeout, limits):
        graded.append(str(path.relative_to(course)))
        return Row(str(path.relative_to(course)), str(path.relative_to(course)), "error", message="stand-in")

    monkeypatch.setattr(progress_module, "grade_row", grade_row)
    return graded


def test_a_second_run_reuses_every_graded_notebook(course, serial, monkeypatch):
    graded = _graded_paths(monkeypatch)
    again = progress(course, workers=1)
    # the notebooks graded by the first run come from the cache; the missing ones, the unreadable file and the
    # unknown notebook (never kept) are looked at again
    first = rows_by_path(serial[0])
    assert sorted(graded) == sorted(path for path, row in first.items() if row["status"] != "graded")
    assert "06_feed_forward/notes.ipynb" in graded and "01_tokens_embeddings/01_tokens_embeddings.ipynb" not in graded
    cached = [row for row in again.to_json()["notebooks"] if row["cached"]]
    assert {row["path"] for row in cached} == {path for path, row in first.items() if row["status"] == "graded"}
    for row in cached:
        assert {**row, "cached": False} == first[row["path"]]
    assert "unchanged since they were last graded" in again.table()


def test_fresh_grades_every_notebook_again(course, serial, monkeypatch):
    graded = _graded_paths(monkeypatch)
    progress(course, workers=1, fresh=True)
    assert sorted(graded) == sorted(str(p.relative_to(course)) for p in progress_module.notebook_paths(course))


def test_a_changed_notebook_alone_is_graded_again(course, serial, monkeypatch):
    path = course / "01_tokens_embeddings" / "01_tokens_embeddings.ipynb"
    original = path.read_bytes()
    nb = nbformat.read(path, as_version=4)
    answer = next(c for c in nb.cells if is_answer_cell(c))
    answer.source += "\n# an edit"
    nbformat.write(nb, path)
    graded = _graded_paths(monkeypatch)
    try:
        progress(course, workers=1)
    finally:
        path.write_bytes(original)
    assert "01_tokens_embeddings/01_tokens_embeddings.ipynb" in graded
    assert not any(p.startswith(("02_normalization/02", "06_feed_forward/06")) for p in graded)
    # an edit in a test cell (which grading never runs from the student's copy) changes nothing
    nb = nbformat.read(path, as_version=4)
    test_cell = next(c for c in nb.cells if is_test_cell(c))
    test_cell.source += "\n# an edit"
    nbformat.write(nb, path)
    graded.clear()
    try:
        progress(course, workers=1)
    finally:
        path.write_bytes(original)
    assert not any(p.startswith("01_tokens_embeddings/01") for p in graded)


def test_an_edited_helper_beside_the_notebook_is_graded_again(course, serial, monkeypatch):
    """The key covers what the cells can import or read from the notebook's folder, not only the cells."""
    notebook = "02_normalization/02_normalization.ipynb"
    helper = course / "02_normalization" / "helper.py"
    graded = []

    def grade_row(path, course, timeout, limits):  # a graded row, so that it is kept
        graded.append(str(path.relative_to(course)))
        return Row(graded[-1], graded[-1], "graded", message="stand-in")

    monkeypatch.setattr(progress_module, "grade_row", grade_row)
    checkpoints = course / "02_normalization" / ".ipynb_checkpoints"
    try:
        helper.write_text("SCALE = 1\n")
        progress(course, workers=1)
        assert notebook in graded and not any(p.startswith("01_tokens_embeddings/01") for p in graded)
        graded.clear()
        checkpoints.mkdir()  # JupyterLab's checkpoints are not what the cells run: nothing to grade again
        (checkpoints / "02_normalization-checkpoint.ipynb").write_text("{}")
        progress(course, workers=1)
        assert notebook not in graded
        helper.write_text("SCALE = 2\n")
        progress(course, workers=1)
        assert notebook in graded
    finally:
        helper.unlink()
        shutil.rmtree(checkpoints, ignore_errors=True)


def test_an_entry_that_is_not_the_one_wanted_is_graded_again(course, serial, monkeypatch):
    """Entries are not signed (nothing that grades reads them): what is checked is that an entry parses and is
    filed under the key and path wanted; anything else is graded again and overwritten."""
    relative = "02_normalization/02_normalization.ipynb"
    store = progress_cache.Cache(course)
    entry = store._entry(relative)
    stored = json.loads(entry.read_text())
    assert set(stored) == {"version", "key", "path", "row"}
    graded = _graded_paths(monkeypatch)
    for mangled in [
        dict(stored, key="0" * 64),
        dict(stored, path="01_tokens_embeddings/01_tokens_embeddings.ipynb"),
        dict(stored, version=1),
        dict(stored, row={"unknown": 1}),
        "{not json",
    ]:
        entry.write_text(mangled if isinstance(mangled, str) else json.dumps(mangled))
        graded.clear()
        result = progress(course, workers=1)
        assert relative in graded, mangled
        assert rows_by_path(result.to_json())[relative]["message"] == "stand-in"


def test_the_cache_lives_outside_the_course_and_grading_never_reads_it(course):
    kept = progress_cache.folder().resolve()
    assert not kept.is_relative_to(course.resolve()) and not kept.is_relative_to(Path(__file__).parents[1] / "course")
    assert oct(progress_cache.Cache(course).root.stat().st_mode & 0o777) == "0o700"
    root = Path(progress_cache.__file__).parent
    users = [p.name for p in root.glob("*.py") if "progress_cache" in p.read_text() and p.name != "progress_cache.py"]
    assert users == ["progress.py"]  # neither grading.py nor the nbgrader plugin
