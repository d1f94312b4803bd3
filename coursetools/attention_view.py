"""Attention maps that draw anywhere: bertviz with local JavaScript, over a static picture.

bertviz's views load require.js, d3 and jQuery from a public CDN, so they render blank
without internet access (many university hubs) and, in JupyterLab, only when the
notebook is trusted. Here the three libraries are inlined from copies that travel with this
package (``coursetools/static``: pinned, with their licences and checksums, see its SOURCES.md),
and every view carries a matplotlib picture of the same weights that stays visible until
bertviz has drawn.
"""

from __future__ import annotations

import base64
import io
import re
import uuid
from pathlib import Path

import matplotlib.pyplot as plt
import torch

STATIC = Path(__file__).resolve().parent / "static"
LIBRARIES = {"require": STATIC / "require.js", "d3": STATIC / "d3.min.js", "jquery": STATIC / "jquery.min.js"}
_CDN_REQUIRE = re.compile(r'<script src="https://cdnjs\.cloudflare\.com/ajax/libs/require\.js/[^"]+"></script>')
_CDN_CONFIG = re.compile(r"require\.config\(\{\s*paths:\s*\{[^}]*\}\s*\}\);")


def _script(source: str) -> str:
    return "<script>" + source.replace("</script>", "<\\/script>") + "</script>"


def _local_libraries() -> str:
    """require.js (unless the page has it), then d3 and jQuery registered as AMD modules."""
    require, d3, jquery = (LIBRARIES[name].read_text(encoding="utf-8") for name in ("require", "d3", "jquery"))
    return "".join([
        _script("if (typeof window.requirejs === 'undefined') {\n" + require + "\n}"),
        # Hide `define` while the libraries run, so they set globals instead of anonymous modules.
        _script("window.__courseDefine = window.define; window.define = undefined;"),
        _script(d3),
        _script(jquery),
        _script(
            "window.define = window.__courseDefine;"
            "if (!require.defined('d3')) { define('d3', [], function () { return window.d3; }); }"
            "if (!require.defined('jquery')) { define('jquery', [], function () { return window.jQuery; }); }"
        ),
    ])


def weights_figure(attention: list[torch.Tensor], tokens: list[str], *, max_layers: int = 4):
    """A grid of heatmaps: one row per layer (at most ``max_layers``), one column per head."""
    layers = attention[:max_layers]
    heads = layers[0].shape[1]
    fig, axes = plt.subplots(len(layers), heads, figsize=(min(2.2 * heads, 10), 2.2 * len(layers)), squeeze=False)
    for row, layer in enumerate(layers):
        for col in range(heads):
            ax = axes[row][col]
            ax.imshow(layer[0, col].detach().float().numpy(), cmap="Blues", vmin=0, vmax=1)
            ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=6)
            ax.set_yticks(range(len(tokens)), tokens, fontsize=6)
            ax.set_title(f"layer {row} head {col}", fontsize=7)
    fig.tight_layout()
    return fig


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def attention_html(attention: list[torch.Tensor], tokens: list[str], view: str = "head") -> str:
    """The HTML of a bertviz ``head`` or ``model`` view that needs no network, with a static fallback."""
    import bertviz

    show = {"head": bertviz.head_view, "model": bertviz.model_view}[view]
    interactive = show([a.detach().float() for a in attention], tokens, html_action="return").data
    interactive = _CDN_REQUIRE.sub("", interactive)
    interactive = _CDN_CONFIG.sub("", interactive)
    if "cdnjs" in interactive:
        raise RuntimeError("bertviz's HTML changed: it still refers to a CDN")
    box = f"course-attention-{uuid.uuid4().hex}"
    fallback = (
        f'<div class="fallback"><img alt="attention weights" src="data:image/png;base64,{_png(weights_figure(attention, tokens))}"/>'
        "<p style='font-size:smaller'>Static picture of the weights. The interactive view replaces it when "
        "JavaScript runs (in JupyterLab: trust the notebook).</p></div>"
    )
    reveal = _script(
        "(function () { var box = document.getElementById('" + box + "'); var tries = 0;"
        "var timer = setInterval(function () { var svg = box.querySelector('svg');"
        "if (svg && svg.querySelector('rect, line, text')) { box.querySelector('.fallback').style.display = 'none';"
        " clearInterval(timer); } else if (++tries > 100) { clearInterval(timer); } }, 100); })();"
    )
    return f'<div id="{box}">{fallback}{_local_libraries()}{interactive}{reveal}</div>'


def _show(attention, tokens, view):
    from IPython.display import HTML, display

    from coursetools.grading_run import being_graded

    if being_graded():  # the grader keeps every output for the feedback: this one is megabytes and seconds, not graded
        print("(the attention view is drawn when you run the notebook, not while it is graded)")
        return
    try:
        display(HTML(attention_html(attention, tokens, view)))
    except (ImportError, OSError, RuntimeError) as error:  # no bertviz, or a broken install: a picture
        print(f"(interactive view unavailable: {error}; showing the weights instead)")
        weights_figure(attention, tokens)
        plt.show()


def head_view(attention: list[torch.Tensor], tokens: list[str]) -> None:
    """bertviz's head view: ``attention`` is one ``[1, heads, seq, seq]`` tensor per layer."""
    _show(attention, tokens, "head")


def model_view(attention: list[torch.Tensor], tokens: list[str]) -> None:
    """bertviz's model view: every layer and head at once."""
    _show(attention, tokens, "model")
