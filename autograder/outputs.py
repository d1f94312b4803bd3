"""Record what a notebook cell shows, as nbformat outputs, while the worker runs it.

During ``nbgrader autograde`` the worker is the only process that runs a student's
cells, so it records their outputs for the feedback: printed text, the value of the
last expression, ``display(...)`` calls and matplotlib figures (as PNG). Everything is
capped, so a cell that prints megabytes cannot swamp the reply or the feedback.

Every image gets alternative text (``metadata[mimetype]["alt"]``, which the feedback's HTML
template writes into ``<img alt>``): a figure is described by its titles and axis labels
(``coursetools.figures.describe_figure``, which gives the figures in a student's JupyterLab the same text).
"""

from __future__ import annotations

import ast
import base64
import contextlib
import io
import sys

from coursetools.figures import describe_figure

MAX_TEXT = 20_000  # characters kept per stream, per cell
MAX_OUTPUTS = 30
MAX_IMAGE = 2 * 2**20  # bytes of PNG
IMAGES = ("image/png", "image/jpeg", "image/gif", "image/webp")  # the ones nbconvert's HTML shows as <img>
NO_DESCRIPTION = "An image this cell displayed (it came without a description)"


def _capped(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    half = MAX_TEXT // 2
    return f"{text[:half]}\n... [{len(text) - MAX_TEXT:,} characters not shown] ...\n{text[-half:]}"


def stream(name: str, text: str) -> dict:
    return {"output_type": "stream", "name": name, "text": _capped(text)}


def error(ename: str, message: str) -> dict:
    return {
        "output_type": "error",
        "ename": ename,
        "evalue": message.splitlines()[0] if message else "",
        "traceback": [message],
    }


def split_last_expression(source: str):
    """(code before, last expression or None): like a notebook, show the last expression's value."""
    tree = ast.parse(source)
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
        return tree, last
    return tree, None


def _with_alt(data: dict, metadata: dict, alt: str) -> dict:
    """``metadata`` with alternative text for each image in ``data`` that has none."""
    metadata = dict(metadata or {})
    for mimetype in IMAGES:
        if mimetype in data:
            own = dict(metadata.get(mimetype) or {})
            if not own.get("alt") and not metadata.get("alt"):
                own["alt"] = alt
            metadata[mimetype] = own
    return metadata


def _is_figure(value) -> bool:
    figure = getattr(sys.modules.get("matplotlib.figure"), "Figure", None)
    return figure is not None and isinstance(value, figure)


class Recorder:
    """Collects one cell's outputs; ``with recorder.capturing(): ...`` around the student's code."""

    def __init__(self, shell, record: bool = True):
        self.shell, self.record = shell, record  # not recording: only capture (and close figures)
        self.outputs: list[dict] = []

    @contextlib.contextmanager
    def capturing(self):
        from IPython.utils.capture import capture_output

        with capture_output() as captured:
            try:
                yield self
            finally:
                self._figures()
        if not self.record:
            self.outputs = []
            return
        streams = [stream(name, getattr(captured, name)) for name in ("stdout", "stderr") if getattr(captured, name)]
        self.outputs[:0] = streams
        for shown in captured.outputs:
            self._data("display_data", shown.data, shown.metadata)

    def result(self, value, count: int) -> None:
        if value is not None and self.record:
            data, metadata = self.shell.display_formatter.format(value)
            alt = describe_figure(value) if _is_figure(value) else NO_DESCRIPTION
            self._data("execute_result", data, metadata, alt=alt, execution_count=count)

    def _data(self, kind: str, data: dict, metadata: dict, alt: str = NO_DESCRIPTION, **extra) -> None:
        data = {k: v for k, v in data.items() if isinstance(v, str) and len(v) <= MAX_IMAGE * 4 // 3}
        if data and len(self.outputs) < MAX_OUTPUTS:
            self.outputs.append(
                {"output_type": kind, "data": data, "metadata": _with_alt(data, metadata, alt), **extra}
            )

    def _figures(self) -> None:
        """Show and close the figures the cell left open, as the inline backend does."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        for number in plt.get_fignums() if self.record else []:
            buffer = io.BytesIO()
            try:
                plt.figure(number).savefig(buffer, format="png", bbox_inches="tight")
            except Exception:  # noqa: BLE001 - a broken figure is the student's; skip it
                continue
            png = base64.b64encode(buffer.getvalue()).decode()
            self._data(
                "display_data",
                {"image/png": png, "text/plain": "<Figure>"},
                {},
                alt=describe_figure(plt.figure(number)),
            )
        plt.close("all")
