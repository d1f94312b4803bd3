"""Tag the cells that may fail on an unfinished notebook, so that Run All goes through all of it.

JupyterLab's Run All stops at the first cell that raises, unless that cell carries the tag
``raises-exception``. An untouched notebook has two kinds of failing cells: the graded test cells
(their checks fail until the exercise is done) and the demonstrations that call an unfinished
answer. This tool puts the tag on exactly those cells of every ``solutions/`` notebook, and takes
it off every other cell; it changes nothing but the cells' ``tags``. nbgrader copies the tags into
the student release, and its grading ignores them (a failing test cell still scores 0).

Which demonstrations depend on an exercise is found by running the untouched release: ``--discover``
executes every ``course/NN/NN.ipynb`` with nbclient (errors allowed) and writes the ids of the
non-test code cells that raise to ``tools/run_all_waiting.json``. The default mode applies the
graded test cells plus that committed list, so it is fast and needs no kernel.

    python tools/run_all_tags.py             # tag solutions/ from the committed list
    python tools/run_all_tags.py --check     # exit 1 if solutions/ or course/ disagree with it
    python tools/run_all_tags.py --discover  # re-run course/ to rebuild the list (minutes), then tag

After tagging, regenerate the release of each changed notebook
(``nbgrader generate_assignment NN_name --force``). After a notebook's cells change (new demos,
renamed cell ids), run ``--discover`` on the regenerated release, then tag and regenerate again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: coursetools is beside tools/
from coursetools.notebook_vocabulary import course_notebook_paths, is_test_cell  # noqa: E402

WAITING = ROOT / "tools" / "run_all_waiting.json"
TAG = "raises-exception"


def notebooks(root: Path, names: list[str] | None = None) -> list[Path]:
    found = course_notebook_paths(root)
    return [p for p in found if not names or p.stem in names or p.stem[:2] in names]


def is_graded_test(cell) -> bool:
    return cell.cell_type == "code" and is_test_cell(cell)


def wanted_ids(nb, waiting: list[str]) -> set[str]:
    return {c.id for c in nb.cells if is_graded_test(c)} | set(waiting)


def tagged_ids(nb) -> set[str]:
    return {c.id for c in nb.cells if TAG in c.metadata.get("tags", [])}


def apply(nb, wanted: set[str]) -> bool:
    """Put the tag on the cells in ``wanted`` and take it off all others; True if anything changed."""
    changed = False
    for cell in nb.cells:
        tags = list(cell.metadata.get("tags", []))
        if (cell.id in wanted) == (TAG in tags):
            continue
        tags = tags + [TAG] if cell.id in wanted else [t for t in tags if t != TAG]
        if tags:
            cell.metadata["tags"] = tags
        else:
            del cell.metadata["tags"]
        changed = True
    return changed


def load_waiting() -> dict[str, list[str]]:
    return json.loads(WAITING.read_text()) if WAITING.exists() else {}


def failing_cells(path: Path, timeout: int = 600) -> list[str]:
    """Ids of the code cells of ``path`` that raise when it runs top to bottom, errors allowed."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # run as a student would: no tag may hide an error from us
        if TAG in cell.metadata.get("tags", []):
            cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t != TAG]
    env_before = os.environ.pop("COURSE_GRADING", None)
    try:
        NotebookClient(
            nb,
            timeout=timeout,
            allow_errors=True,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
    finally:
        if env_before is not None:
            os.environ["COURSE_GRADING"] = env_before
    return [
        c.id
        for c in nb.cells
        if c.cell_type == "code" and any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]


def discover(names: list[str] | None) -> dict[str, list[str]]:
    waiting = load_waiting()
    for path in notebooks(ROOT / "course", names):
        nb = nbformat.read(path, as_version=4)
        tests = {c.id for c in nb.cells if is_graded_test(c)}
        start = time.perf_counter()
        demos = [i for i in failing_cells(path) if i not in tests]
        print(
            f"{path.stem} ({time.perf_counter() - start:.0f} s): {len(demos)} demonstration(s) wait for "
            f"an exercise: {', '.join(demos) or '-'}",
            flush=True,
        )
        waiting[path.stem] = demos
    WAITING.write_text(json.dumps(dict(sorted(waiting.items())), indent=1) + "\n")
    return waiting


def drift(waiting: dict[str, list[str]]) -> list[str]:
    problems = []
    for path in notebooks(ROOT / "solutions"):
        nb = nbformat.read(path, as_version=4)
        ids = {c.id for c in nb.cells}
        wanted = wanted_ids(nb, waiting.get(path.stem, []))
        if missing := set(waiting.get(path.stem, [])) - ids:
            problems.append(f"{path.stem}: listed cells not in the notebook (run --discover): {sorted(missing)}")
        if tagged_ids(nb) != wanted:
            problems.append(f"solutions/{path.stem}: tags differ (run tools/run_all_tags.py)")
        release = ROOT / "course" / path.stem / path.name
        if release.exists():
            rnb = nbformat.read(release, as_version=4)
            if tagged_ids(rnb) != wanted & {c.id for c in rnb.cells}:
                problems.append(
                    f"course/{path.stem}: tags differ from solutions/ "
                    f"(nbgrader generate_assignment {path.stem} --force)"
                )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the tags drifted")
    parser.add_argument("--discover", action="store_true", help="re-run course/ notebooks to find dependent demos")
    parser.add_argument("notebooks", nargs="*", help="limit --discover to these (NN or NN_name)")
    args = parser.parse_args(argv)
    if args.check:
        problems = drift(load_waiting())
        print("\n".join(problems) or "Run All tags are up to date.")
        return 1 if problems else 0
    waiting = discover(args.notebooks or None) if args.discover else load_waiting()
    for path in notebooks(ROOT / "solutions"):
        nb = nbformat.read(path, as_version=4)
        if apply(nb, wanted_ids(nb, waiting.get(path.stem, []))):
            path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
            print(f"tagged {path.relative_to(ROOT)}: regenerate with nbgrader generate_assignment {path.stem} --force")
    return 0


if __name__ == "__main__":
    sys.exit(main())
