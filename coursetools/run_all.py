"""One line instead of a traceback when a demonstration needs an exercise that is not done yet.

Run All (JupyterLab's ``Run > Run All Cells``) goes through a whole notebook even while exercises
are unfinished: the test cells and the demonstrations that use an exercise carry the cell tag
``raises-exception`` (put there by ``tools/run_all_tags.py``), so their error does not stop it.
A test cell shows the course's usual check report. A demonstration that calls an answer whose
cell still says ``raise NotImplementedError()`` would show a long traceback instead; the setup cell
of every notebook calls :func:`explain_unfinished`, and from then on such a cell shows one line::

    This cell waits for "Exercise 2: RMSNorm": your `RMSNorm.forward` still raises NotImplementedError. ...

Only a ``NotImplementedError`` raised by a ``raise NotImplementedError()`` line of the notebook's
own code gets the short line, and a ``NameError`` for a name that such a failed cell would have
defined (a later cell that uses its result); every other error keeps its full traceback.
"""

from __future__ import annotations

import ast
import json
import linecache
import os
import re
from pathlib import Path

from coursetools import cell_sources
from coursetools.notebook_vocabulary import (
    exercise_heading,
    find_course_root,
    heading_title,
    is_answer_cell,
    is_stub_line,
    source_text,
)


def _notebook_file() -> Path | None:
    """The notebook this kernel runs: JupyterLab's session name, else the only notebook in the folder."""
    named = os.environ.get("JPY_SESSION_NAME")
    if named and Path(named).is_file():
        return Path(named)
    found = sorted(Path.cwd().glob("*.ipynb"))
    return found[0] if len(found) == 1 else None


def _is_notebook_code(filename: str) -> bool:
    # ipykernel compiles each cell to a file named /tmp/ipykernel_<pid>/<hash>.py; plain IPython
    # calls them <ipython-input-...>.
    return "ipykernel_" in filename or filename.startswith("<ipython-input")


def stub_name(tb) -> str | None:
    """The qualified name of the notebook function whose ``raise NotImplementedError()`` raised, or None."""
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return None
    code = last.tb_frame.f_code
    if not _is_notebook_code(code.co_filename):
        return None
    if not is_stub_line(linecache.getline(code.co_filename, last.tb_lineno)):
        return None
    name = getattr(code, "co_qualname", code.co_name)
    return name.removesuffix(".__init__")  # "your `Residual`" rather than "your `Residual.__init__`"


def exercise_for(qualname: str, notebook: Path | None) -> str | None:
    """The title of the exercise whose answer cell defines ``qualname`` (its first part), as its heading gives it."""
    if notebook is None:
        return None
    top = qualname.split(".")[0]
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return None
    pattern = re.compile(rf"^\s*(def|class)\s+{re.escape(top)}\b", re.MULTILINE)
    for index, cell in enumerate(cells):
        if is_answer_cell(cell) and pattern.search(source_text(cell.get("source", ""))):
            heading = exercise_heading(cells, index)
            return heading_title(cells[heading].get("source", "")) if heading is not None else None
    return None


def message(qualname: str, exercise: str | None) -> str:
    where = f'"{exercise}"' if exercise else "an exercise"
    return (
        f"This cell waits for {where}: your `{qualname}` still raises NotImplementedError. "
        "Finish that answer, run its cell, then run this cell again."
    )


# Names that a cell would have defined had it not stopped at an unfinished answer -> why it stopped.
_NOT_MADE: dict[str, str] = {}


def _cell_names(tb) -> set[str]:
    """The names the failed cell assigns at its top level (its outermost frame in notebook code)."""
    while tb is not None:
        code = tb.tb_frame.f_code
        if _is_notebook_code(code.co_filename) and code.co_name == "<module>":
            break
        tb = tb.tb_next
    if tb is None:
        return set()
    try:
        tree = ast.parse("".join(linecache.getlines(tb.tb_frame.f_code.co_filename)))
    except SyntaxError:
        return set()
    names, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        if not isinstance(node, ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return names


def _handler(shell, etype, value, tb, tb_offset=None):
    reason = None
    if issubclass(etype, NameError) and getattr(value, "name", None) in _NOT_MADE:
        reason = _NOT_MADE[value.name]
        line = f"This cell waits for {reason}: it uses `{value.name}`, which an earlier cell could not make yet."
    elif issubclass(etype, NotImplementedError) and (name := getattr(value, "stub_qualname", None) or stub_name(tb)):
        # (stub_qualname: the stub was met in another process, such as a rank of coursetools.ranks)
        exercise = exercise_for(name, _notebook_file())
        reason = f'"{exercise}"' if exercise else "an exercise"
        line = message(name, exercise)
    if reason is None:  # not an unfinished answer: the usual traceback
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None
    for made in _cell_names(tb):  # the cells after this one that need these names wait too
        _NOT_MADE[made] = reason
    # IPython shows nothing of a custom handler's own: show the error (still an error, so the cell
    # counts as failed and only its raises-exception tag lets Run All go on) with this one line.
    shell._showtraceback(etype, value, [line])
    return None


def explain_unfinished() -> None:
    """From now on, a cell that runs into an unfinished answer says so in one line (prints nothing).

    Every notebook's setup cell calls it, so it also gives the figures the notebook shows alternative
    text (``coursetools.figures``), except while the grader runs it (the worker describes them itself).
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    _NOT_MADE.clear()  # running the setup cell again starts afresh
    if shell is not None:
        shell.set_custom_exc((NotImplementedError, NameError), _handler)
        cell_sources.remember(shell)  # for the rules the test cells apply (autograder.check)
        from coursetools.grading_run import being_graded

        if not being_graded():
            from coursetools.figures import show_figures_with_alt_text

            show_figures_with_alt_text(shell)


PROGRESS_SOLUTIONS = "This is the instructor's copy: the progress table reports on the notebooks in course/, run it there."


def progress_button() -> None:
    """A "Show my progress" button: a click runs ``python -m autograder progress`` and shows its table.

    Run All only draws the button, so it stays fast; the table (a minute or two, since it grades every
    notebook) comes when you ask for it. The grading runs in a thread, so the notebook stays usable.
    """
    import subprocess
    import sys
    import threading

    from coursetools.grading_run import being_graded

    if being_graded():
        print("The progress table is not computed while this notebook is being graded.")
        return
    import ipywidgets as widgets
    from IPython.display import display

    # width auto: ipywidgets' default button width cut the label off ("Show my prog...")
    button = widgets.Button(description="Show my progress", icon="table", tooltip="python -m autograder progress",
                            layout=widgets.Layout(width="auto"))
    output = widgets.Output()

    def run() -> None:
        try:
            if Path.cwd().parent.name == "solutions":
                output.append_stdout(PROGRESS_SOLUTIONS + "\n")
                return
            output.append_stdout("Grading every notebook in course/ (a minute or two)...\n")
            root = find_course_root(Path.cwd()) or Path.cwd()
            command = [sys.executable, "-m", "autograder", "progress"]
            with subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) as job:
                for line in job.stdout:
                    output.append_stdout(line)
        finally:
            button.disabled = False

    def clicked(_button) -> None:
        button.disabled = True
        output.clear_output()
        threading.Thread(target=run, daemon=True).start()

    button.on_click(clicked)
    display(widgets.VBox([button, output]))
