"""The figures a student's notebook shows carry alternative text (coursetools.figures).

Checked on IPython's own display formatter with the inline backend's PNG formatter, as a kernel has
them; tests/test_run_all_browser.py checks the ``<img alt>`` that JupyterLab draws from them.
"""

from __future__ import annotations

import html
import re
from types import SimpleNamespace

import matplotlib
import pytest
from IPython.core.formatters import DisplayFormatter
from IPython.core.pylabtools import select_figure_formats

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from coursetools.figures import show_figures_with_alt_text  # noqa: E402


def _shell(formats=("png",)):
    shell = SimpleNamespace(display_formatter=DisplayFormatter())
    select_figure_formats(shell, set(formats))
    return shell


@pytest.fixture
def figure():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3])
    ax.set_title('Loss <per> "step"')
    ax.set_xlabel("step")
    yield fig
    plt.close(fig)


def test_a_figure_comes_with_its_description(figure):
    shell = _shell()
    assert show_figures_with_alt_text(shell)
    data, metadata = shell.display_formatter.format(figure)
    alt = 'Figure: Loss <per> "step" (x: step)'
    assert metadata["image/png"]["alt"] == alt
    tag = re.fullmatch(r'<img alt="([^"]*)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"/>', data["text/html"])
    assert tag, data["text/html"]
    assert html.unescape(tag[1]) == alt
    assert tag[2] == data["image/png"]  # the same picture, drawn once


def test_the_png_is_drawn_once_and_retina_sizes_are_kept(figure):
    shell = _shell(("retina",))
    png = shell.display_formatter.formatters["image/png"]
    draw = png.type_printers[type(figure)]
    calls = []
    png.for_type(type(figure), lambda fig: calls.append(fig) or draw(fig))
    assert show_figures_with_alt_text(shell)
    assert show_figures_with_alt_text(shell)  # a second call (the setup cell run again) changes nothing
    data, metadata = shell.display_formatter.format(figure)
    assert len(calls) == 1
    width, height = metadata["image/png"]["width"], metadata["image/png"]["height"]
    assert f'width="{width}" height="{height}"' in data["text/html"]


def test_without_the_inline_backend_nothing_changes(figure):
    shell = SimpleNamespace(display_formatter=DisplayFormatter())  # no PNG formatter for figures
    assert not show_figures_with_alt_text(shell)
    data, _ = shell.display_formatter.format(figure)
    assert "text/html" not in data
