"""Whole-architecture diagrams of the four models the course builds, drawn with matplotlib.

``draw_architectures()`` draws GPT-2, a Llama-style decoder, BERT and the encoder–decoder side by
side; ``draw_architectures(["llama"])`` draws one of them alone (notebooks 08 and 09 show the model
at hand this way). Every part is labelled with the notebook where the student builds it, written
after a middle dot ("RMSNorm · 02"), so the picture doubles as a map of the course.

The models are data (``ARCHITECTURES``): lists of boxes, residual branch points and additions, and
repeated blocks. The drawing code only lays them out bottom to top, input below and output on top,
as in the 2017 paper's figure. Residual connections run on the right of each column, so pre-norm
(norm inside the branch, the sum left alone) and post-norm (norm after the sum) look different.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib import patches

from coursetools.figures import MAX_ALT

# Fill colours by kind of part, the same in every model.
COLORS = {
    "embed": "#f9d5e5", "position": "#e5d8f0", "norm": "#fff2b2", "attention": "#fdd0a2",
    "ffn": "#c6dbef", "head": "#c7e9c0",
}


@dataclass(frozen=True)
class Box:
    """One part of a model: what it is, the notebooks that build it, and its kind (for the colour)."""

    label: str
    notebooks: tuple[str, ...]
    kind: str

    @property
    def text(self) -> str:
        return f"{self.label} · {', '.join(self.notebooks)}"

    @property
    def stacked_text(self) -> str:
        """The notebooks on a line of their own, for the narrow boxes of a Row."""
        return f"{self.label}\n· {', '.join(self.notebooks)}"


@dataclass(frozen=True)
class Row:
    """Several inputs side by side whose outputs are summed (token + position + segment embeddings)."""

    boxes: tuple[Box, ...]


@dataclass(frozen=True)
class Branch:
    """The point where a residual connection leaves the main path."""


@dataclass(frozen=True)
class Add:
    """A residual addition: the main path plus the value saved at the last Branch."""


@dataclass(frozen=True)
class Label:
    """Plain text on the path: the input at the bottom, the output at the top."""

    text: str


@dataclass(frozen=True)
class Block:
    """A block repeated N times, drawn once in a frame with its title and "N×"."""

    title: str
    notebooks: tuple[str, ...]
    items: tuple = ()

    @property
    def text(self) -> str:
        return f"{self.title} · {', '.join(self.notebooks)}"


@dataclass(frozen=True)
class Column:
    """One stack of parts, drawn bottom to top."""

    items: tuple
    memory_to: str | None = None  # label of a box in the next column that reads this column's output


@dataclass(frozen=True)
class Architecture:
    title: str
    notebooks: tuple[str, ...]
    columns: tuple[Column, ...]
    note: str = ""

    @property
    def text(self) -> str:
        return f"{self.title} · {', '.join(self.notebooks)}"


def _pre_norm(norm: Box, attention: Box, ffn: Box) -> tuple:
    """x + attn(norm1(x)), then x + ffn(norm2(x)): the sum is never normalized."""
    return (Branch(), norm, attention, Add(), Branch(), norm, ffn, Add())


def _post_norm(norm: Box, *sublayers: Box) -> tuple:
    """norm(x + sublayer(x)) for each sublayer in turn (BERT, the 2017 Transformer)."""
    items: tuple = ()
    for sublayer in sublayers:
        items += (Branch(), sublayer, Add(), norm)
    return items


LAYER_NORM = Box("LayerNorm", ("02",), "norm")
RMS_NORM = Box("RMSNorm", ("02",), "norm")
GELU_MLP = Box("GELU MLP", ("06",), "ffn")

ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": Architecture("GPT-2", ("08",), (Column((
        Label("tokens"),
        Row((Box("token embedding", ("01",), "embed"), Box("learned positions", ("01",), "position"))),
        Block("pre-norm block", ("07",), _pre_norm(
            LAYER_NORM, Box("causal multi-head\nattention", ("04", "05"), "attention"), GELU_MLP)),
        Box("final LayerNorm", ("02",), "norm"),
        Box("LM head,\ntied to the embedding", ("08",), "head"),
        Label("next-token logits"),
    )),), note="learned positions, LayerNorm,\nGELU MLP, tied head"),
    "llama": Architecture("Llama-style decoder", ("08",), (Column((
        Label("tokens"),
        Box("token embedding\n(no position table)", ("01",), "embed"),
        Block("pre-norm block", ("07", "08"), _pre_norm(
            RMS_NORM, Box("causal grouped-query\nattention, RoPE on q, k", ("03", "05"), "attention"),
            Box("SwiGLU", ("06",), "ffn"))),
        Box("final RMSNorm", ("02",), "norm"),
        Box("LM head, untied", ("08",), "head"),
        Label("next-token logits"),
    )),), note="RoPE, RMSNorm, SwiGLU,\ngrouped-query attention, untied head"),
    "bert": Architecture("BERT", ("09",), (Column((
        Label("tokens, segment ids"),
        Row((Box("token", ("01",), "embed"), Box("position", ("01",), "position"),
             Box("segment", ("09",), "embed"))),
        LAYER_NORM,
        Block("post-norm encoder block", ("07",), _post_norm(
            LAYER_NORM, Box("bidirectional attention,\npadding mask", ("04", "05"), "attention"), GELU_MLP)),
        Box("MLM head, tied to\nthe token embedding", ("09",), "head"),
        Label("logits at masked tokens"),
    )),), note="three embeddings, post-norm,\nattention both ways, MLM head"),
    "encoder_decoder": Architecture("encoder–decoder", ("09",), (
        Column((
            Label("source tokens"),
            Row((Box("embedding × √d", ("01",), "embed"), Box("sinusoidal\npositions", ("01",), "position"))),
            Block("post-norm encoder block", ("07",), _post_norm(
                LAYER_NORM, Box("self-attention,\npadding mask", ("04", "05"), "attention"),
                Box("ReLU MLP", ("06",), "ffn"))),
            Box("final LayerNorm", ("02",), "norm"),
            Label("memory"),
        ), memory_to="cross-attention"),
        Column((
            Label("target tokens"),
            Row((Box("embedding × √d", ("01",), "embed"), Box("sinusoidal\npositions", ("01",), "position"))),
            Block("post-norm decoder block", ("07",), _post_norm(
                LAYER_NORM, Box("masked (causal)\nself-attention", ("04", "05"), "attention"),
                Box("cross-attention", ("04", "05"), "attention"), Box("ReLU MLP", ("06",), "ffn"))),
            Box("final LayerNorm", ("02",), "norm"),
            Box("linear output layer", ("09",), "head"),
            Label("next-token logits"),
        )),
    ), note="an encoder stack; a decoder with masked\nself-attention and cross-attention to its output"),
}
ALIASES = {"gpt-2": "gpt2", "llama-style": "llama", "encoder-decoder": "encoder_decoder", "transformer": "encoder_decoder"}

# Layout, in data units (one unit is UNIT_INCHES in a figure of our own).
BOX_WIDTH, COLUMN_STEP, MODEL_GAP = 2.8, 3.6, 0.3
LINE_HEIGHT, BOX_PAD, GAP, ADD_RADIUS = 0.24, 0.16, 0.26, 0.14
FRAME_PAD, FRAME_TITLE = 0.22, 0.34
UNIT_INCHES = 0.72


def _box_height(box: Box, stacked: bool = False) -> float:
    text = box.stacked_text if stacked else box.text
    return LINE_HEIGHT * (text.count("\n") + 1) + 2 * BOX_PAD


def _item_height(item) -> float:
    if isinstance(item, Box):
        return _box_height(item)
    if isinstance(item, Row):  # the boxes, then the addition above them
        return max(_box_height(box, stacked=True) for box in item.boxes) + GAP + 2 * ADD_RADIUS
    if isinstance(item, Add):
        return 2 * ADD_RADIUS
    if isinstance(item, Label):
        return LINE_HEIGHT
    if isinstance(item, Branch):
        return 0.0
    if isinstance(item, Block):
        inner = [i for i in item.items if not isinstance(i, Branch)]
        return FRAME_PAD + sum(_item_height(i) for i in inner) + GAP * (len(inner) - 1) + FRAME_TITLE
    raise TypeError(item)


def _column_height(column: Column) -> float:
    visible = [i for i in column.items if not isinstance(i, Branch)]
    return sum(_item_height(i) for i in visible) + GAP * (len(visible) - 1)


def _arrow(ax, start, end, **style):
    props = {"arrowstyle": "-|>", "color": "0.35", "linewidth": 1.0, "shrinkA": 0, "shrinkB": 0,
             "mutation_scale": 9} | style
    ax.annotate("", xy=end, xytext=start, arrowprops=props, zorder=1)


def _draw_box(ax, box: Box, x: float, y: float, width: float, stacked: bool = False) -> tuple[float, float]:
    """Draw `box` with its bottom centre at (x, y); return its (bottom, top)."""
    height = _box_height(box, stacked)
    ax.add_patch(patches.FancyBboxPatch((x - width / 2, y), width, height, boxstyle="round,pad=0,rounding_size=0.08",
                                        facecolor=COLORS[box.kind], edgecolor="0.3", linewidth=0.8, zorder=2))
    ax.text(x, y + height / 2, box.stacked_text if stacked else box.text, ha="center", va="center", fontsize=7,
            zorder=3, linespacing=1.15)
    return y, y + height


def _draw_add(ax, x: float, y: float) -> None:
    ax.add_patch(patches.Circle((x, y + ADD_RADIUS), ADD_RADIUS, facecolor="white", edgecolor="0.3",
                                linewidth=0.9, zorder=2))
    ax.text(x, y + ADD_RADIUS, "+", ha="center", va="center", fontsize=9, zorder=3)


def _draw_items(ax, items, x: float, y: float, places: dict) -> float:
    """Draw `items` upwards from height y on the centre line x; return the top of the last one.

    Each item is joined to the previous one by an arrow; `places` collects the left edge and centre
    height of every box by label, for the encoder's arrow into the cross-attention.
    """
    top = None          # top of the previous item, where the next arrow starts
    branch = None       # height where the current residual connection left the path
    for item in items:
        if isinstance(item, Branch):  # at the start of a block, on the arrow that enters the frame
            branch = y - FRAME_PAD / 2 if top is None else top + GAP / 2
            continue
        bottom = y if top is None else top + GAP
        if top is not None and not isinstance(item, Block):
            _arrow(ax, (x, top), (x, bottom))
        if isinstance(item, Box):
            _, top = _draw_box(ax, item, x, bottom, BOX_WIDTH)
            places[item.label] = (x - BOX_WIDTH / 2, (bottom + top) / 2)
        elif isinstance(item, Row):
            count = len(item.boxes)
            width = (BOX_WIDTH - 0.12 * (count - 1)) / count
            row_top = bottom + max(_box_height(box, stacked=True) for box in item.boxes)
            add_y = row_top + GAP
            for k, box in enumerate(item.boxes):
                bx = x - BOX_WIDTH / 2 + width / 2 + k * (width + 0.12)
                _draw_box(ax, box, bx, row_top - _box_height(box, stacked=True), width, stacked=True)
                _arrow(ax, (bx, row_top), (x + (bx - x) * 0.3, add_y + 0.03))
            _draw_add(ax, x, add_y)
            top = add_y + 2 * ADD_RADIUS
        elif isinstance(item, Add):
            _draw_add(ax, x, bottom)
            if branch is not None:  # the skip line: right, up, and into the circle from the side
                side = x + BOX_WIDTH / 2 + 0.1
                ax.plot([x, side, side], [branch, branch, bottom + ADD_RADIUS], color="0.35", linewidth=1.0, zorder=1)
                ax.plot([x], [branch], "o", color="0.35", markersize=2.5, zorder=1)
                _arrow(ax, (side, bottom + ADD_RADIUS), (x + ADD_RADIUS, bottom + ADD_RADIUS))
            top = bottom + 2 * ADD_RADIUS
        elif isinstance(item, Label):
            ax.text(x, bottom + LINE_HEIGHT / 2, item.text, ha="center", va="center", fontsize=8, style="italic")
            top = bottom + LINE_HEIGHT
        elif isinstance(item, Block):
            top = _draw_block(ax, item, x, bottom, top, places)
    return top


def _draw_block(ax, block: Block, x: float, bottom: float, below: float | None, places: dict) -> float:
    """The frame, "N×" and the title, then the block's items inside; return the frame's top."""
    height = _item_height(block)
    half = BOX_WIDTH / 2 + FRAME_PAD + 0.06
    ax.add_patch(patches.FancyBboxPatch((x - half, bottom), 2 * half, height, boxstyle="round,pad=0,rounding_size=0.15",
                                        facecolor="0.95", edgecolor="0.5", linewidth=1.0, zorder=0))
    ax.text(x - half + 0.08, bottom + height - FRAME_TITLE / 2 - 0.02, block.text, ha="left", va="center",
            fontsize=7, fontweight="bold", color="0.25")
    ax.text(x - half - 0.06, bottom + 0.2, "N×", ha="right", va="center", fontsize=10, fontweight="bold")
    if below is not None:
        _arrow(ax, (x, below), (x, bottom + FRAME_PAD))
    top = _draw_items(ax, block.items, x, bottom + FRAME_PAD, places)
    _arrow(ax, (x, top), (x, bottom + height), arrowstyle="-")  # the next item's arrow starts at the frame's top
    return bottom + height


def _resolve(models) -> list[str]:
    names = [models] if isinstance(models, str) else list(models)
    resolved = []
    for name in names:
        key = ALIASES.get(name.lower(), name.lower())
        if key not in ARCHITECTURES:
            raise ValueError(f"unknown model {name!r}; choose from {sorted(ARCHITECTURES)}")
        resolved.append(key)
    if not resolved:
        raise ValueError("give at least one model")
    return resolved


def draw_architectures(models: Sequence[str] | str = ("gpt2", "llama", "bert", "encoder_decoder"), ax=None):
    """Draw the chosen models side by side and return the matplotlib figure.

    `models`: names from ``ARCHITECTURES`` ("gpt2", "llama", "bert", "encoder_decoder"), or one name.
    `ax`: an axes to draw into; by default a new figure sized to fit. The axes is switched off.
    """
    names = _resolve(models)
    columns = [(name, column) for name in names for column in ARCHITECTURES[name].columns]
    width = len(columns) * COLUMN_STEP + (len(names) - 1) * MODEL_GAP
    height = max(_column_height(column) for _, column in columns)
    head = 1.3  # room for each model's title and note
    left = 0.4  # room for the first "N×"
    width += left
    if ax is None:
        fig, ax = plt.subplots(figsize=(width * UNIT_INCHES, (height + head + 0.2) * UNIT_INCHES))
        fig.subplots_adjust(left=0, right=1, bottom=0, top=1)
    places: dict = {}
    x = left + COLUMN_STEP / 2
    for k, name in enumerate(names):
        model = ARCHITECTURES[name]
        first = x
        ends = []
        for column in model.columns:
            top = _draw_items(ax, column.items, x, 0.0, places)
            ends.append((x, top, column))
            x += COLUMN_STEP
        centre, model_top = (first + x - COLUMN_STEP) / 2, max(top for _, top, _ in ends)
        ax.text(centre, model_top + head - 0.3, model.text, ha="center", va="center", fontsize=11, fontweight="bold")
        ax.text(centre, model_top + head - 0.82, model.note, ha="center", va="center", fontsize=7.5, color="0.3")
        for (cx, top, column) in ends:
            if column.memory_to is not None:  # the encoder's output feeds every decoder block's cross-attention
                tx, ty = places[column.memory_to]
                elbow = cx + BOX_WIDTH / 2 + 0.35
                ax.plot([cx, cx, elbow, elbow], [top, top + 0.15, top + 0.15, ty], color="tab:red", linewidth=1.1,
                        zorder=1)
                _arrow(ax, (elbow, ty), (tx, ty), color="tab:red")
        if k < len(names) - 1:
            x += MODEL_GAP
    ax.set_xlim(0, width)
    ax.set_ylim(-0.2, height + head)
    ax.set_aspect("equal")
    ax.axis("off")
    if not ax.figure.get_label():  # a drawing with no title or axis labels describes itself (coursetools.figures)
        ax.figure.set_label(describe_architectures(names))
    return ax.figure


def _part(item, inside: bool) -> str | None:
    """One step of a column in words (a block's own steps in brackets when ``inside``), or None for a branch
    point (its addition says it)."""
    if isinstance(item, Label):
        return item.text
    if isinstance(item, Box):
        return " ".join(item.label.split())
    if isinstance(item, Row):
        return " + ".join(" ".join(box.label.split()) for box in item.boxes)
    if isinstance(item, Add):
        return "+ residual"
    if isinstance(item, Block):
        steps = [p for p in (_part(i, inside) for i in item.items) if p]
        return f"N × {item.title}" + (f" ({' → '.join(steps)})" if inside else "")
    return None


def describe_architectures(models: Sequence[str] | str) -> str:
    """Alternative text for ``draw_architectures(models)``, which draws no title or axis labels.

    One model: its parts in order, input first, with a block's own steps in brackets unless that makes the
    text longer than ``coursetools.figures.MAX_ALT`` (the encoder–decoder). Several models: each one's title
    and what sets it apart (the note under its title).
    """
    names = _resolve(models)
    start = "Block diagram" + ("s" if len(names) > 1 else "") + ", input at the bottom, output at the top"
    if len(names) > 1:
        return f"{start}: " + "; ".join(f"{ARCHITECTURES[n].title} ({' '.join(ARCHITECTURES[n].note.split())})"
                                        for n in names) + "."
    model = ARCHITECTURES[names[0]]
    for inside in (True, False):  # only the encoder–decoder has two columns, the encoder's output feeding the other
        columns = [" → ".join(p for p in (_part(i, inside) for i in column.items) if p) for column in model.columns]
        text = f"{start}. {model.title}: " + ". Beside it, reading that memory through cross-attention: ".join(columns) + "."
        if len(text) <= MAX_ALT:
            break
    return text


def notebook_numbers(model: str) -> list[str]:
    """Every notebook number that the drawing of `model` cites, in order (for tests and readers)."""
    arch = ARCHITECTURES[_resolve([model])[0]]
    numbers = list(arch.notebooks)

    def walk(items):
        for item in items:
            if isinstance(item, Box):
                numbers.extend(item.notebooks)
            elif isinstance(item, Row):
                for box in item.boxes:
                    numbers.extend(box.notebooks)
            elif isinstance(item, Block):
                numbers.extend(item.notebooks)
                walk(item.items)

    for column in arch.columns:
        walk(column.items)
    return numbers
