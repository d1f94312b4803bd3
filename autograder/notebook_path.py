"""Which file ``python -m autograder check NOTEBOOK`` grades: a path, or a notebook's name found where copies live.

Every notebook prints one command, ``python -m autograder check NN_name``, and it must work wherever the student's
copy came from: a clone or Binder (the terminal opens in the course's top folder: ``course/NN_name/NN_name.ipynb``),
a JupyterHub (the terminal opens in the student's home, where the Assignments panel fetched
``NN_name/NN_name.ipynb``), a terminal opened in the notebook's own folder. An argument that is an existing file is
graded as it is; otherwise its name (``NN_name``, ``NN_name.ipynb``, or the stem of a path that does not exist
here) is looked for in ``PLACES``, from the current folder, then from the home folder. The first copy found is
graded, and the command says which file that was.
"""

from __future__ import annotations

from pathlib import Path

# Where a copy named NAME.ipynb is looked for, under the current folder and then the home folder, in this order.
PLACES = ("{name}.ipynb", "{name}/{name}.ipynb", "course/{name}/{name}.ipynb")


class NotebookNotFound(FileNotFoundError):
    """Neither the path given nor a notebook of that name in any of the places looked in; ``str`` says where."""


def notebook_name(argument: str) -> str:
    """``02_normalization`` for ``02_normalization``, ``02_normalization.ipynb`` or ``course/x/02_normalization.ipynb``."""
    name = Path(argument).name
    return name[: -len(".ipynb")] if name.endswith(".ipynb") else name


def places(name: str, cwd: Path, home: Path) -> list[Path]:
    """Every path where a copy of notebook ``name`` is looked for, in order, without repeats."""
    found: list[Path] = []
    for folder in (cwd, home):
        for place in PLACES:
            path = folder / place.format(name=name)
            if path not in found:
                found.append(path)
    return found


def locate(argument: str, cwd: Path | None = None, home: Path | None = None) -> tuple[Path, bool]:
    """The notebook to grade, and whether it was found by its name (not at the path given).

    Raises ``NotebookNotFound`` saying "no such file", with the path tried and every place looked in.
    """
    cwd = Path.cwd() if cwd is None else cwd
    home = Path.home() if home is None else home
    given = (cwd / Path(argument).expanduser()).absolute()
    if given.is_file():
        return given, False
    name = notebook_name(argument)
    looked = places(name, cwd, home) if name else []
    for path in looked:
        if path.is_file():
            return path, True
    tried = [given, *[p for p in looked if p != given]]
    raise NotebookNotFound(
        f"no such file: {given}; nor a notebook {name}.ipynb in "
        + ", ".join(str(p.parent) for p in tried[1:])
        + ". Give the notebook's path, e.g. `python -m autograder check path/to/NOTEBOOK.ipynb`"
    )
