"""Box-and-arrow pictures of one Transformer block (notebook 07): pre-norm, post-norm and parallel.

Each picture reads from the bottom (the block's input ``x``) to the top (its output ``y``). The
residual stream is the thick grey vertical line on the left; the sublayers sit on branches to its
right, and a branch's result joins the stream at a circled ``+``. Where a LayerNorm sits *on* the
stream (post-norm), the stream has to pass through it; where it sits on a branch (pre-norm, parallel)
the stream from ``x`` to ``y`` is a straight, untouched sum. The drawing is plain matplotlib and
deterministic.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Circle, FancyBboxPatch

from coursetools.architecture import COLORS

# The same fills as the course map (coursetools.architecture), so a part looks the same in every picture.
COLOURS = {"LN": COLORS["norm"], "Attn": COLORS["attention"], "FFN": COLORS["ffn"]}
STREAM = "#7f7f7f"
BOX_W, BOX_H = 1.3, 0.5
BRANCH_X = 1.7  # x of the branch column; the stream is at x = 0


def _box(ax, x, y, label):
    colour = COLOURS["LN" if label.startswith("LN") else label.split()[0]]
    ax.add_patch(FancyBboxPatch((x - BOX_W / 2, y - BOX_H / 2), BOX_W, BOX_H, boxstyle="round,pad=0.04",
                                facecolor=colour, edgecolor="black", linewidth=1, zorder=5))
    ax.text(x, y, label, ha="center", va="center", fontsize=9, zorder=6)


def _plus(ax, y):
    ax.add_patch(Circle((0, y), 0.17, facecolor="white", edgecolor="black", linewidth=1.2, zorder=5))
    ax.text(0, y - 0.01, "+", ha="center", va="center", fontsize=13, zorder=6)


def _arrow(ax, points, colour="black", width=1.2):
    """A polyline through ``points`` with an arrow head at its last point."""
    for (x0, y0), (x1, y1) in zip(points[:-2], points[1:-1], strict=True):
        ax.plot([x0, x1], [y0, y1], color=colour, linewidth=width, zorder=2, solid_capstyle="butt")
    ax.annotate("", xy=points[-1], xytext=points[-2], zorder=2,
                arrowprops={"arrowstyle": "-|>", "color": colour, "linewidth": width, "shrinkA": 0, "shrinkB": 0})


def _stream(ax, y0, y1):
    _arrow(ax, [(0, y0), (0, y1)], STREAM, 3.5)


def _branch(ax, y_split, labels, y_join):
    """A residual branch: leave the stream at ``y_split``, pass ``labels`` bottom to top, add back at ``y_join``."""
    ys = [y_split + 0.8 + i for i in range(len(labels))]
    _arrow(ax, [(0, y_split), (BRANCH_X, y_split), (BRANCH_X, ys[0] - BOX_H / 2)])
    for i, (label, y) in enumerate(zip(labels, ys, strict=True)):
        _box(ax, BRANCH_X, y, label)
        if i:
            _arrow(ax, [(BRANCH_X, ys[i - 1] + BOX_H / 2), (BRANCH_X, y - BOX_H / 2)])
    _arrow(ax, [(BRANCH_X, ys[-1] + BOX_H / 2), (BRANCH_X, y_join), (0.17, y_join)])
    _plus(ax, y_join)


def _frame(ax, title, top):
    ax.text(0, -0.35, "x", ha="center", va="center", fontsize=12, style="italic")
    ax.text(0, top + 0.3, "y", ha="center", va="center", fontsize=12, style="italic")
    ax.set_title(title, fontsize=11)
    ax.set_xlim(-0.9, 3.4)
    ax.set_aspect("equal")
    ax.axis("off")


def pre_norm(ax) -> float:
    """x -> LN -> Attn -> + -> LN -> FFN -> +: the norms are on the branches, the stream is a straight sum."""
    _stream(ax, -0.15, 7.2)
    _branch(ax, 0.4, ["LN (norm1)", "Attn"], 3.0)
    _branch(ax, 3.6, ["LN (norm2)", "FFN"], 6.2)
    _frame(ax, "pre-norm (GPT-2, Llama)", 7.2)
    return 7.2


def post_norm(ax) -> float:
    """x -> Attn -> + -> LN -> FFN -> + -> LN: each LayerNorm sits on the stream itself."""
    _stream(ax, -0.15, 8.0)
    _branch(ax, 0.4, ["Attn"], 2.0)
    _box(ax, 0, 2.75, "LN (norm1)")  # on the stream: everything from below passes through it
    _branch(ax, 3.6, ["FFN"], 5.2)
    _box(ax, 0, 6.1, "LN (norm2)")
    _frame(ax, "post-norm (2017 paper, BERT)", 8.0)
    return 8.0


def parallel(ax) -> float:
    """x -> one LN -> (Attn and FFN side by side) -> one +: both sublayers read the same normalized input."""
    _stream(ax, -0.15, 4.6)
    _arrow(ax, [(0, 0.4), (BRANCH_X, 0.4), (BRANCH_X, 1.2 - BOX_H / 2)])
    _box(ax, BRANCH_X, 1.2, "LN (norm1)")
    for x, label in ((BRANCH_X - 0.75, "Attn"), (BRANCH_X + 0.75, "FFN")):
        _arrow(ax, [(BRANCH_X, 1.2 + BOX_H / 2), (BRANCH_X, 1.7), (x, 1.7), (x, 2.4 - BOX_H / 2)])
        _box(ax, x, 2.4, label)
        _arrow(ax, [(x, 2.4 + BOX_H / 2), (x, 3.6), (0.17, 3.6)])
    _plus(ax, 3.6)
    _frame(ax, "parallel (GPT-J, PaLM)", 4.6)
    return 4.6


DRAW = {"pre-norm": pre_norm, "post-norm": post_norm, "parallel": parallel}


def draw_blocks(*kinds: str, width: float = 3.6):
    """One panel per kind ("pre-norm", "post-norm", "parallel"), side by side, at one scale; returns the figure.

    Each drawing function returns the height of its output ``y``, so that the panels share their y range.
    """
    fig, axes = plt.subplots(1, len(kinds), figsize=(width * len(kinds), 5.2), squeeze=False)
    top = max(DRAW[kind](ax) for ax, kind in zip(axes[0], kinds, strict=True))
    for ax in axes[0]:
        ax.set_ylim(-0.7, top + 0.7)  # one scale for every panel
    fig.tight_layout()
    return fig
