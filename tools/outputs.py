"""Re-execute the solution notebooks whose outputs are out of date, and only those (`make outputs`).

A notebook's outputs depend on its code cells and on its checks (``autograder/notebooks/nbNN_*.py``, whose
messages the test cells print). Their fingerprint, a SHA-256 of both, is recorded in ``solutions/outputs.json``
each time the notebook is executed; ``make outputs`` re-executes a notebook when its fingerprint no longer
matches, so editing one notebook re-executes that notebook alone, and an unchanged tree re-executes nothing.
Markdown does not enter the fingerprint: rewording a text changes no output. A change to code that every
notebook runs (the grader, coursetools, tinystories, a library) is not seen here: nbval then reports the outputs
that changed, and ``--all`` (``make outputs ALL=1``) or the notebook's name re-executes them.

Each execution writes its outputs without what would churn from run to run: no widget state in the notebook's
metadata (hundreds of lines that nbgrader would copy into the release); in each output that shows a widget (the
progress bars), a model id derived from the cell's id instead of a random one (no state is saved for it to refer
to); and each cell's printed text as one output per stream, however the kernel happened to flush it (nbval
compares the streams joined too).

    python tools/outputs.py                      # the notebooks whose fingerprint changed
    python tools/outputs.py 02_normalization     # these notebooks, whatever their fingerprint
    python tools/outputs.py --all                # every notebook
    python tools/outputs.py --check              # exit 1 naming each notebook whose fingerprint changed
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: coursetools is beside tools/
from coursetools.notebook_vocabulary import course_notebook_paths  # noqa: E402

SOLUTIONS = ROOT / "solutions"
RECORD = SOLUTIONS / "outputs.json"
CHECKS = ROOT / "autograder" / "notebooks"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
CELL_TIMEOUT = 600  # seconds: notebook 13's short training run is the longest cell, about 20 s here


def notebook_path(name: str) -> Path:
    return SOLUTIONS / name / f"{name}.ipynb"


def notebook_names() -> list[str]:
    return [p.parent.name for p in course_notebook_paths(SOLUTIONS)]


def fingerprint(name: str) -> str:
    """SHA-256 of what this notebook's outputs are computed from: its code cells, in order, and its checks."""
    cells = json.loads(notebook_path(name).read_text(encoding="utf-8"))["cells"]
    digest = hashlib.sha256()
    for cell in cells:
        if cell["cell_type"] == "code":
            digest.update(b"\0cell\0" + "".join(cell["source"]).encode())
    for checks in sorted(CHECKS.glob(f"nb{name[:2]}_*.py")):
        digest.update(b"\0checks\0" + checks.read_bytes())
        for helper in shared_helpers(checks):
            digest.update(b"\0helper\0" + helper.read_bytes())
    return digest.hexdigest()


def shared_helpers(checks: Path) -> list[Path]:
    """The private modules of autograder/notebooks (``_seeds.py``, ``_rope.py``) that a notebook's checks import:
    the checks' messages depend on them too."""
    names = set()
    for node in ast.walk(ast.parse(checks.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "autograder.notebooks":
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autograder.notebooks."):
            names.add(node.module.rsplit(".", 1)[1])
    return [
        CHECKS / f"{name}.py" for name in sorted(names) if name.startswith("_") and (CHECKS / f"{name}.py").is_file()
    ]


def recorded() -> dict[str, str]:
    return json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.is_file() else {}


def out_of_date() -> list[str]:
    record = recorded()
    return [name for name in notebook_names() if record.get(name) != fingerprint(name)]


def without_churn(nb) -> None:
    """Drop the widget state, give each widget output a model id made from its cell's id, and join the pieces of
    one stream (a cell's prints arrive in as many pieces as the kernel happened to flush)."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        joined = []
        for output in cell.get("outputs", []):
            previous = joined[-1] if joined else None
            if (
                previous
                and output["output_type"] == previous["output_type"] == "stream"
                and output["name"] == previous["name"]
            ):
                previous["text"] += output["text"]
            else:
                joined.append(output)
        if "outputs" in cell:
            cell["outputs"] = joined
        views = [o for o in cell.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
        for number, output in enumerate(views):
            output["data"][WIDGET_VIEW]["model_id"] = f"{cell.get('id', 'cell')}-{number}"
        _fixed_element_ids(cell)


# The random element ids that drawn HTML outputs carry (coursetools.attention_view's boxes, bertviz's views): a
# fresh uuid each run, so every execution would rewrite them.
RANDOM_ELEMENT_ID = re.compile(r"\b(course-attention|bertviz)-[0-9a-f]{32}\b")


def _fixed_element_ids(cell) -> None:
    """Each random element id in the cell's outputs becomes one made from the cell's id and its order of appearance
    (the same id each time it appears, as the page's script refers to it by that id)."""
    renamed: dict[str, str] = {}

    def fixed(match: re.Match) -> str:
        return renamed.setdefault(match[0], f"{match[1]}-{cell.get('id', 'cell')}-{len(renamed)}")

    for output in cell.get("outputs", []):
        for kind, value in output.get("data", {}).items():
            if isinstance(value, str):
                output["data"][kind] = RANDOM_ELEMENT_ID.sub(fixed, value)
            elif isinstance(value, list) and all(isinstance(line, str) for line in value):
                output["data"][kind] = [RANDOM_ELEMENT_ID.sub(fixed, line) for line in value]


def execute(name: str) -> float:
    """Run the notebook top to bottom in its own folder, as `jupyter nbconvert --execute` would, and write it."""
    import nbformat
    from nbclient import NotebookClient

    from coursetools.grading_run import GRADING_ENV, SHORT_RUNS_ENV

    for short in (GRADING_ENV, SHORT_RUNS_ENV):  # the recorded outputs are the full-length demonstrations'
        os.environ.pop(short, None)
    path = notebook_path(name)
    nb = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    without_churn(nb)
    nbformat.write(nb, path)
    return time.perf_counter() - started


def write_record(names: list[str]) -> None:
    record = recorded()
    record.update({name: fingerprint(name) for name in names})
    RECORD.write_text(json.dumps(dict(sorted(record.items())), indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="re-execute these (names such as 02_normalization)")
    parser.add_argument("--all", action="store_true", help="re-execute every notebook")
    parser.add_argument("--check", action="store_true", help="exit 1 if a notebook's outputs are out of date")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.notebooks) - set(notebook_names()))
    if unknown:
        parser.error(f"no solution notebook {', '.join(unknown)}; the notebooks are {', '.join(notebook_names())}")
    if args.check:
        stale = out_of_date()
        for name in stale:
            print(f"{name}: its code cells or checks changed since its outputs were written: make outputs")
        return 1 if stale else 0
    names = notebook_names() if args.all else (args.notebooks or out_of_date())
    if not names:
        print("every notebook's outputs are up to date (python tools/outputs.py --all re-executes them all)")
    for name in names:
        print(f"executing {name} ...", flush=True)
        seconds = execute(name)
        write_record([name])
        print(f"  {name}: {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
