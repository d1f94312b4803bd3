"""Use what you built in an earlier notebook: load its definitions by name.

Notebook 05 puts notebook 03's RoPE inside attention. Rather than a second copy of RoPE,
it runs the setup cell and the answer cells of ``../03_rope/03_rope.ipynb`` (your own
work, next to the current notebook) and takes the names it needs.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import nbformat
import torch


def load_from_notebook(notebook: str, *names: str, folder: Path | None = None):
    """The objects called ``names`` defined by the answer cells of a sibling course notebook."""
    path = (folder or Path.cwd().parent) / notebook / f"{notebook}.ipynb"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: load_from_notebook looks next to this notebook's folder")
    namespace: dict = {"__name__": f"notebook_{notebook}"}
    cells = [
        cell for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == "code" and (cell.get("id") == "setup" or cell.metadata.get("nbgrader", {}).get("solution"))
    ]
    # Quietly, and without touching this notebook's random numbers (a setup cell seeds torch).
    with torch.random.fork_rng(), contextlib.redirect_stdout(io.StringIO()):
        for cell in cells:
            exec(compile(cell.source, f"<{notebook}: cell {cell.get('id')}>", "exec"), namespace)
    missing = [name for name in names if name not in namespace]
    if missing:
        raise NameError(f"{path.name} defines no {', '.join(missing)}")
    values = tuple(namespace[name] for name in names)
    return values[0] if len(values) == 1 else values
