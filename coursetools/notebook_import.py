"""Use what you built in an earlier notebook: load its definitions by name.

Notebook 05 puts notebook 03's RoPE inside attention. Rather than a second copy of RoPE,
it runs the setup cell (and the cell with id ``earlier``, which loads that notebook's own
earlier parts) and the answer cells of ``../03_rope/03_rope.ipynb`` (your own
work, next to the current notebook) and takes the names it needs.

``use_earlier(notebook, name, fallback)`` is the forgiving form that later notebooks use
for their building blocks (notebook 07 builds its blocks from your LayerNorm, attention and
FeedForward). It returns your own ``name`` when that notebook is there and its answer cell
is finished; otherwise it prints one line saying why, and returns ``fallback``, the course's
reference version built on PyTorch (``autograder.reference``), so that the later notebook
still runs. Grading never depends on it: the checks inject reference components.
"""

from __future__ import annotations

import ast
import contextlib
import io
import sys
import types
from pathlib import Path

import nbformat
import torch

from coursetools.notebook_vocabulary import STUB_LINE, is_answer_cell, is_definition_cell, is_stub_source


def answer_cells(path: Path) -> list:
    return [cell for cell in nbformat.read(path, as_version=4).cells
            if cell.cell_type == "code" and is_answer_cell(cell)]


def _defines(source: str, name: str) -> bool:
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def use_earlier(notebook: str, name: str, fallback, *, folder: Path | None = None):
    """Your ``name`` from the sibling notebook ``notebook``, or ``fallback`` with one line that says why.

    ``fallback`` is used when the notebook is missing, when the answer cell that defines ``name``
    still holds ``raise NotImplementedError()``, or when loading it raises.
    """
    path = (folder or Path.cwd().parent) / notebook / f"{notebook}.ipynb"
    reason = None
    if not path.is_file():
        reason = f"{path} is not there"
    else:
        try:
            defining = [cell for cell in answer_cells(path) if _defines(cell.source, name)]
            if any(is_stub_source(cell.source) for cell in defining):
                reason = f"its answer cell still says {STUB_LINE}"
            else:
                value = load_from_notebook(notebook, name, folder=folder)
        except Exception as error:  # noqa: BLE001 - any failure means: use the reference
            reason = f"loading it raised {type(error).__name__}: {error}"
    if reason is None:
        print(f"Using your {name} from {notebook}.")
        return value
    print(f"Your {name} from {notebook} is not finished ({reason}); using the course's reference version built on "
          f"PyTorch instead. Finish notebook {notebook[:2]} and re-run this cell to use your own.")
    return fallback


def load_from_notebook(notebook: str, *names: str, folder: Path | None = None):
    """The objects called ``names`` defined by the answer cells of a sibling course notebook."""
    path = (folder or Path.cwd().parent) / notebook / f"{notebook}.ipynb"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: load_from_notebook looks next to this notebook's folder")
    # A real module in sys.modules, not a bare dict: torch.compile (and pickle) look classes up by __module__.
    module = types.ModuleType(f"notebook_{notebook}", f"The answer cells of {path}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    # In notebook order, the preamble (the imports, the earlier notebooks' parts the answers build on, the given
    # configuration classes and classes: notebook_vocabulary.is_preamble_cell) and the answer cells.
    cells = [cell for cell in nbformat.read(path, as_version=4).cells if is_definition_cell(cell)]
    # Quietly, and without touching this process's random numbers (a setup cell seeds torch) or its thread
    # count (notebook 11's setup cell pins one thread for its tiny models; a training run must keep its own).
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(), contextlib.redirect_stdout(io.StringIO()):
            for cell in cells:
                # dont_inherit: compile as a kernel does, without this module's `from __future__ import annotations`
                exec(compile(cell.source, f"<{notebook}: cell {cell.get('id')}>", "exec", dont_inherit=True),
                     namespace)
    finally:
        torch.set_num_threads(threads)
    missing = [name for name in names if name not in namespace]
    if missing:
        raise NameError(f"{path.name} defines no {', '.join(missing)}")
    values = tuple(namespace[name] for name in names)
    return values[0] if len(values) == 1 else values
