"""Alternative text for the course's matplotlib figures: in the students' JupyterLab and in the feedback.

A figure is described by what it says of itself, its titles and axis labels (:func:`describe_figure`).
The grader's worker writes that text into the feedback's images (``autograder.outputs``). In a
student's kernel, :func:`show_figures_with_alt_text` (called by the setup cell of every notebook,
through ``coursetools.run_all.explain_unfinished``) makes each figure that the notebook shows carry it
too. JupyterLab 4 draws an ``image/png`` output as an ``<img>`` without alternative text (it reads
only the width and height from the output's metadata), so every figure also gets a ``text/html``
representation, ``<img alt="..." src="data:image/png;base64,...">`` with the same PNG, which
JupyterLab prefers to ``image/png``. The ``image/png`` stays in the output (with the text in its
metadata, ``metadata["image/png"]["alt"]``), for whatever reads only that: PDF export, nbval,
tests. The PNG is drawn once, by the inline backend's own formatter, with its settings.
"""

from __future__ import annotations

import html
import importlib

MAX_ALT = 500  # characters of alternative text
INLINE = "module://matplotlib_inline.backend_inline"


def _words(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ALT else text[: MAX_ALT - 3] + "..."


def describe_figure(figure) -> str:
    """Alternative text for a matplotlib figure, from what it says of itself: its label (``figure.set_label``,
    for a drawing with no title or axis labels, such as ``coursetools.architecture``'s), else its titles and
    axis labels."""
    label = _words(figure.get_label())
    if label:
        return _clip(label)
    panels, count = [], 0
    for ax in figure.get_axes():
        if not ax.get_visible():
            continue
        if ax.get_label() == "<colorbar>":  # a colour bar says what its colours mean, through its label
            label = _words(ax.get_ylabel() or ax.get_xlabel())
            panels += [f"colour bar: {label}"] if label else []
            continue
        count += 1
        title = " / ".join(t for t in (_words(ax.get_title(loc)) for loc in ("left", "center", "right")) if t)
        labels = [f"{name}: {label}" for name, label in (("x", _words(ax.get_xlabel())), ("y", _words(ax.get_ylabel())))
                  if label and ax.axison]
        if title and labels:
            panels.append(f"{title} ({', '.join(labels)})")
        elif title or labels:
            panels.append(title or ", ".join(labels))
    text = "Figure" if count <= 1 else f"Figure with {count} panels"
    said = [part for part in (_words(figure.get_suptitle()), "; ".join(panels)) if part]
    text += ": " + "; ".join(said) if said else " without a title or axis labels"
    return _clip(text)


def _describe(figure) -> str:
    try:
        return describe_figure(figure)
    except Exception:  # noqa: BLE001 - a figure the description cannot read still shows, described plainly
        return "Figure"


def img_tag(png_base64: str, alt: str, metadata: dict | None = None) -> str:
    """An ``<img>`` showing a base64 PNG with alternative text (and the width and height of ``metadata``)."""
    size = "".join(f' {k}="{int(v)}"' for k, v in (metadata or {}).items() if k in ("width", "height"))
    return f'<img alt="{html.escape(alt, quote=True)}"{size} src="data:image/png;base64,{png_base64}"/>'


def show_figures_with_alt_text(shell=None) -> bool:
    """Make the figures this IPython kernel shows carry alternative text; True if it now does.

    Needs the inline backend (a notebook's): its PNG formatter for figures is wrapped, and a
    ``text/html`` formatter added beside it. Calling it again changes nothing. ``%config
    InlineBackend.figure_formats`` (which resets the figure formatters) turns it off again.
    """
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    import matplotlib
    from matplotlib.figure import Figure

    formatters = shell.display_formatter.formatters
    png, page = formatters.get("image/png"), formatters.get("text/html")
    if png is None or page is None:
        return False
    if Figure not in png.type_printers and matplotlib.rcParams["backend"] == INLINE:
        # The inline backend sets its formatters when it is first loaded (the first figure), and they
        # would replace these: load it now.
        importlib.import_module(INLINE.removeprefix("module://"))
    draw = png.type_printers.get(Figure)
    if draw is None:  # another backend: figures do not come as PNG outputs
        return False
    if getattr(draw, "course_alt_text", False):
        return True
    drawn = {}  # the figure the text/html formatter has just drawn -> its PNG, for the image/png formatter

    def as_png(figure):
        data = draw(figure)  # base64 text, or (text, {"width": ..., "height": ...}) for retina figures
        data, metadata = data if isinstance(data, tuple) else (data, None)
        return data, dict(metadata or {})

    def png_with_alt(figure):
        done = drawn.pop(id(figure), None)
        data, metadata = done if done is not None else as_png(figure)
        if not data:
            return None
        return data, {**metadata, "alt": _describe(figure)}

    def html_with_alt(figure):
        drawn.clear()
        data, metadata = as_png(figure)
        if not data:
            return None
        drawn[id(figure)] = (data, metadata)
        return img_tag(data if isinstance(data, str) else data.decode(), _describe(figure), metadata)

    png_with_alt.course_alt_text = True
    png.for_type(Figure, png_with_alt)
    page.for_type(Figure, html_with_alt)
    return True
