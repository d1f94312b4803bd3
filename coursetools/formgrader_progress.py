"""formgrader's long clicks say what they are doing, and for how long, instead of a bare "Please wait...".

nbgrader 0.9.6's formgrader answers a click on *Autograde* (or *Collect*, *Generate Feedback*...) with one request
that returns when the work is done, and meanwhile shows "Please wait..." in the row's first cell: 9 to 19 s per
submission on the hub, for an autograde, with nothing saying what happens (issue 52 §5). Each of its pages here
carries ``SCRIPT``: a click in one of those columns names the work, and every second the row's "Please wait..."
becomes "Please wait: autograding: ... (7 s)" until formgrader's own answer redraws the row. Nothing of
formgrader's changes: its handlers and pages are its own, and the script only writes into a cell it has emptied.

formgrader renders its pages from a Jinja environment that it keeps in the server's settings
(``nbgrader_jinja2_env``); once every extension has loaded, this one wraps that environment's ``get_template`` so
that each page it renders carries the script. The instructors' settings on the hub enable it
(jupyter/hub/instructors/jupyter_server_config.json).
"""

from __future__ import annotations

import json

# The column a click is in (its cell's class in formgrader's tables) -> what the click starts.
SAYS = {
    "autograde": "autograding: the notebook runs in the sandbox, then every check",
    "collect": "collecting the submissions from the exchange",
    "generate-feedback": "generating feedback",
    "release-feedback": "releasing feedback",
    "generate": "generating the student version",
    "release": "releasing the assignment",
    "unrelease": "unreleasing the assignment",
}
WAITING = "Please wait..."  # what formgrader writes into a row while it works

SCRIPT = (
    "<script>/* coursetools/formgrader_progress.py: what a long click is doing */ (function () {\n"
    f"  var says = {json.dumps(SAYS)}, waiting = {json.dumps(WAITING)}, what = null, started = null;\n"
    '  document.addEventListener("click", function (event) {\n'
    '    var cell = event.target.closest ? event.target.closest("td") : null;\n'
    "    if (!cell) return;\n"
    "    for (var name in says) {\n"
    "      if (cell.classList.contains(name)) { what = says[name]; started = Date.now(); }\n"
    "    }\n"
    "  }, true);\n"
    "  setInterval(function () {\n"
    "    if (started === null) return;\n"
    '    var rows = Array.prototype.filter.call(document.querySelectorAll("td"), function (td) {\n'
    '      return td.textContent === waiting || td.textContent.indexOf("Please wait: ") === 0;\n'
    "    });\n"
    "    if (!rows.length) { started = null; return; }\n"
    "    var seconds = Math.round((Date.now() - started) / 1000);\n"
    "    rows.forEach(function (td) {\n"
    '      td.textContent = "Please wait: " + what + " (" + seconds + " s)";\n'
    "    });\n"
    "  }, 1000);\n"
    "})();</script>\n"
)


class _SaysWhatItDoes:
    """A formgrader template whose page carries ``SCRIPT``."""

    def __init__(self, template):
        self._template = template

    def __getattr__(self, name):
        return getattr(self._template, name)

    def render(self, *args, **kwargs) -> str:
        page = self._template.render(*args, **kwargs)
        return page.replace("</body>", SCRIPT + "</body>", 1)


def wrap(environment) -> None:
    """Make every page ``environment`` (formgrader's Jinja environment) renders carry ``SCRIPT``, once."""
    if getattr(environment, "_course_says_what_it_does", False):
        return
    get_template = environment.get_template

    def said(*args, **kwargs):
        return _SaysWhatItDoes(get_template(*args, **kwargs))

    environment.get_template = said
    environment._course_says_what_it_does = True


def _jupyter_server_extension_points():
    return [{"module": "coursetools.formgrader_progress"}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Nothing to do yet: nbgrader's formgrader, loaded in alphabetical order, comes after this one."""


async def _start_jupyter_server_extension(serverapp) -> None:
    """Every extension has loaded: formgrader's pages, where it is on, say what a long click is doing."""
    environment = serverapp.web_app.settings.get("nbgrader_jinja2_env")
    if environment is not None:
        wrap(environment)
        serverapp.log.info("formgrader: a long click says what it is doing (coursetools.formgrader_progress)")
