"""tools/outputs.py: `make outputs` re-executes exactly the notebooks whose outputs are out of date, and writes
them without the state that churns from run to run."""

from __future__ import annotations

import importlib.util
import json

import nbformat
import pytest
from notebooks import NOTEBOOKS, ROOT

spec = importlib.util.spec_from_file_location("outputs_tool", ROOT / "tools" / "outputs.py")
outputs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(outputs)


def test_every_notebooks_outputs_were_written_from_its_current_code_and_checks():
    """A code cell or a check edited without `make outputs` leaves the committed outputs stale."""
    assert outputs.notebook_names() == NOTEBOOKS
    stale = outputs.out_of_date()
    assert not stale, f"outputs older than their code cells or checks: {stale}; run `make outputs` and commit"


@pytest.fixture
def solutions(tmp_path, monkeypatch):
    """A scratch copy of two notebooks and their checks, as the tool sees solutions/ and autograder/notebooks/."""
    for name in ("02_normalization", "03_rope"):
        (tmp_path / "solutions" / name).mkdir(parents=True)
        source = outputs.notebook_path(name)
        (tmp_path / "solutions" / name / source.name).write_bytes(source.read_bytes())
    (tmp_path / "checks").mkdir()
    for checks in [*outputs.CHECKS.glob("nb0[23]_*.py"), outputs.CHECKS / "_rope.py"]:
        (tmp_path / "checks" / checks.name).write_bytes(checks.read_bytes())
    monkeypatch.setattr(outputs, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(outputs, "RECORD", tmp_path / "solutions" / "outputs.json")
    monkeypatch.setattr(outputs, "CHECKS", tmp_path / "checks")
    executed = []
    monkeypatch.setattr(outputs, "execute", lambda name: executed.append(name) or 0.0)
    outputs.write_record(["02_normalization", "03_rope"])
    return tmp_path, executed


def _edit_cell(path, cell_type: str, text: str) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == cell_type)
    cell["source"] = ["".join(cell["source"]) + text]
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def test_an_unchanged_tree_re_executes_nothing(solutions, capsys):
    _, executed = solutions
    assert outputs.main([]) == 0 and executed == []
    assert "up to date" in capsys.readouterr().out
    assert outputs.main(["--check"]) == 0


def test_a_changed_code_cell_re_executes_that_notebook_alone(solutions):
    folder, executed = solutions
    _edit_cell(folder / "solutions" / "03_rope" / "03_rope.ipynb", "code", "\n# a comment")
    assert outputs.main(["--check"]) == 1
    assert outputs.main([]) == 0 and executed == ["03_rope"]
    assert outputs.main(["--check"]) == 0, "the fingerprint is recorded after the notebook is executed"


def test_a_changed_check_re_executes_its_notebook(solutions):
    folder, executed = solutions
    checks = next((folder / "checks").glob("nb02_*.py"))
    checks.write_text(checks.read_text() + "\n# another message\n")
    assert outputs.main([]) == 0 and executed == ["02_normalization"]


def test_a_changed_shared_helper_re_executes_the_notebooks_whose_checks_import_it(solutions):
    folder, executed = solutions
    helper = folder / "checks" / "_rope.py"  # notebook 03's checks import it, notebook 02's do not
    helper.write_text(helper.read_text() + "\n# another oracle\n")
    assert outputs.main([]) == 0 and executed == ["03_rope"]


def test_markdown_changes_no_output(solutions):
    folder, executed = solutions
    _edit_cell(folder / "solutions" / "02_normalization" / "02_normalization.ipynb", "markdown", "\nA new sentence.")
    assert outputs.main([]) == 0 and executed == []


def test_named_and_all_re_execute_whatever_the_fingerprints(solutions):
    _, executed = solutions
    outputs.main(["02_normalization"])
    outputs.main(["--all"])
    assert executed == ["02_normalization", "02_normalization", "03_rope"]
    with pytest.raises(SystemExit):
        outputs.main(["02_normalisation"])


def test_written_outputs_hold_no_widget_state_and_stable_widget_ids():
    nb = nbformat.v4.new_notebook(metadata={"widgets": {"application/vnd.jupyter.widget-state+json": {}}})
    cell = nbformat.v4.new_code_cell("progress()", id="progress")
    view = {"version_major": 2, "version_minor": 0, "model_id": "4cd49dfadff6481aa7d5fd4f9c511783"}
    cell.outputs = [nbformat.v4.new_output("display_data", data={outputs.WIDGET_VIEW: dict(view)}) for _ in range(2)]
    nb.cells = [cell]
    outputs.without_churn(nb)
    assert "widgets" not in nb.metadata
    assert [o["data"][outputs.WIDGET_VIEW]["model_id"] for o in cell.outputs] == ["progress-0", "progress-1"]


def test_drawn_outputs_keep_their_element_ids_from_run_to_run():
    """The random ids of an attention view's box and of bertviz's view become ids made from the cell's id, the same
    one wherever the output refers to it, so a re-executed notebook's drawings do not churn."""
    first, second = "c674c3a0abbf4d45a1802fdcbdbe776d", "2df5042a58824b82b39f2069370a1aba"
    html = f'<div id="course-attention-{first}"></div><script>find("course-attention-{first}")</script>'
    script = [f'var root = "bertviz-{second}";\n', f'draw("bertviz-{second}")\n']
    cell = nbformat.v4.new_code_cell("show()", id="attention-demo")
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={"text/html": html}),
        nbformat.v4.new_output("display_data", data={"application/javascript": script}),
    ]
    outputs.without_churn(nbformat.v4.new_notebook(cells=[cell]))
    assert cell.outputs[0]["data"]["text/html"] == html.replace(first, "attention-demo-0")
    assert cell.outputs[1]["data"]["application/javascript"] == [
        line.replace(second, "attention-demo-1") for line in script
    ]


def test_a_cells_printed_text_is_one_output_per_stream():
    cell = nbformat.v4.new_code_cell("check()", id="ex1-test")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="✓ one\n"),
        nbformat.v4.new_output("stream", name="stdout", text="✓ two\n"),
        nbformat.v4.new_output("stream", name="stderr", text="a warning\n"),
        nbformat.v4.new_output("stream", name="stdout", text="All 2 checks passed.\n"),
    ]
    nb = nbformat.v4.new_notebook(cells=[cell])
    outputs.without_churn(nb)
    assert [(o["name"], o["text"]) for o in cell.outputs] == [
        ("stdout", "✓ one\n✓ two\n"),
        ("stderr", "a warning\n"),
        ("stdout", "All 2 checks passed.\n"),
    ]
