"""coursetools.architecture draws every model, alone and together, and cites only real notebooks."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib import patches  # noqa: E402
from notebooks import discovered  # noqa: E402

from coursetools.architecture import (  # noqa: E402
    ARCHITECTURES,
    Box,
    Row,
    describe_architectures,
    draw_architectures,
    notebook_numbers,
)
from coursetools.figures import MAX_ALT, describe_figure  # noqa: E402

EXISTING = {name[:2] for name in discovered()}
CITATION = re.compile(r"·\s*(\d\d(?:,\s*\d\d)*)\s*$")


def _cited(fig) -> list[str]:
    """Notebook numbers written after a middle dot at the end of any text in the figure."""
    numbers = []
    for text in fig.axes[0].texts:
        match = CITATION.search(text.get_text())
        if match:
            numbers += re.findall(r"\d\d", match.group(1))
    return numbers


@pytest.mark.parametrize("models", [list(ARCHITECTURES), *([name] for name in ARCHITECTURES), "llama"])
def test_draws_and_cites_existing_notebooks(models):
    fig = draw_architectures(models)
    try:
        cited = _cited(fig)
        names = [models] if isinstance(models, str) else models
        assert sorted(cited) == sorted(n for name in names for n in notebook_numbers(name))
        assert cited and set(cited) <= EXISTING, f"labels cite missing notebooks: {set(cited) - EXISTING}"
    finally:
        plt.close(fig)


def test_every_label_fits_in_its_box():
    """Each box's text lies inside the box once drawn (a label that overflows is unreadable)."""
    fig = draw_architectures()
    try:
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        boxes = [p for p in ax.patches if isinstance(p, patches.FancyBboxPatch) and p.get_zorder() == 2]
        placed = 0
        for text in ax.texts:
            x, y = ax.transData.transform(text.get_position())
            (box,) = [b for b in boxes if b.get_window_extent(renderer).contains(x, y)] or [None]
            if box is None or text.get_text().strip() in ("", "+"):
                continue
            inner, outer = text.get_window_extent(renderer), box.get_window_extent(renderer)
            assert outer.x0 <= inner.x0 and inner.x1 <= outer.x1 and outer.y0 <= inner.y0 and inner.y1 <= outer.y1, (
                f"{text.get_text()!r} overflows its box"
            )
            placed += 1
        assert placed == len(boxes), "every box holds its label"
    finally:
        plt.close(fig)


def test_the_facts_each_model_shows():
    """The parts that tell the four models apart are in their drawings."""

    def texts(name):
        fig = draw_architectures([name])
        try:
            return " ".join(t.get_text().replace("\n", " ") for t in fig.axes[0].texts)
        finally:
            plt.close(fig)

    gpt2, llama, bert, encdec = (texts(name) for name in ("gpt2", "llama", "bert", "encoder_decoder"))
    assert "learned positions" in gpt2 and "LayerNorm" in gpt2 and "GELU" in gpt2 and "tied" in gpt2
    assert "pre-norm" in gpt2 and "final LayerNorm" in gpt2
    assert "RoPE" in llama and "RMSNorm" in llama and "SwiGLU" in llama and "grouped-query" in llama
    assert "untied" in llama and "final RMSNorm" in llama and "LayerNorm" not in llama.replace("RMSNorm", "")
    assert "segment" in bert and "post-norm" in bert and "padding mask" in bert and "MLM head" in bert
    assert "masked (causal) self-attention" in encdec and "cross-attention" in encdec and "memory" in encdec
    for text in (gpt2, llama, bert, encdec):
        assert "N×" in text


def test_draws_into_a_given_axes_and_rejects_unknown_models():
    fig, ax = plt.subplots()
    try:
        assert draw_architectures(["bert"], ax=ax) is fig
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="unknown model"):
        draw_architectures(["gpt5"])


@pytest.mark.parametrize("models", [list(ARCHITECTURES), *([name] for name in ARCHITECTURES)])
def test_the_drawing_carries_its_alt_text(models):
    """The diagram has no title or axis labels, so its figure's label describes it (coursetools.figures reads
    it): one model's every part in order, input first; several models' names and what sets each apart."""
    fig = draw_architectures(models)
    try:
        alt = describe_figure(fig)
    finally:
        plt.close(fig)
    assert alt == describe_architectures(models) and len(alt) <= MAX_ALT
    drawn = [ARCHITECTURES[name] for name in models]
    assert all(model.title in alt for model in drawn)
    if len(drawn) == 1:
        column_items = [item for column in drawn[0].columns for item in column.items]
        parts = [
            " ".join(box.label.split())
            for item in column_items
            for box in (item.boxes if isinstance(item, Row) else (item,))
            if isinstance(box, Box)
        ]
        found = 0
        for part in parts:  # said in the order they are drawn, input first
            assert part in alt[found:], f"{part!r} is missing, or said out of order"
            found = alt.index(part, found) + len(part)
    else:
        assert all(" ".join(model.note.split()) in alt for model in drawn)


def test_a_figure_with_its_own_label_keeps_it():
    fig, ax = plt.subplots()
    fig.set_label("Two diagrams of my own")
    try:
        draw_architectures(["bert"], ax=ax)
        assert describe_figure(fig) == "Two diagrams of my own"
    finally:
        plt.close(fig)
