"""What must never reach students: solution lines and hidden-test lines of the sources."""

from __future__ import annotations

import re
from html.parser import HTMLParser

MARKERS = {
    "solution": ("### BEGIN SOLUTION", "### END SOLUTION"),
    "hidden": ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"),
}
MIN_LENGTH = 8  # shorter lines (`pass`, `return x`) carry no answer


def _blocks(source: str, begin: str, end: str):
    inside, kept, public = False, [], []
    for line in source.splitlines():
        text = line.strip()
        if text == begin:
            inside = True
        elif text == end:
            inside = False
        elif text:
            (kept if inside else public).append(text)
    return kept, public


def secret_lines(nb, kind: str, shown_before: str = "") -> set[str]:
    """Lines inside the ``kind`` blocks of a source notebook that it shows nowhere else.

    A line the notebook also shows in public (an exercise's instructions quote
    ``x32 = x.float()``, say), or that an earlier notebook shows (``shown_before``, their
    ``public_text``: notebook 11 gives a cached generation loop whose lines notebook 13's
    answer reuses), gives nothing away, so it is not a secret.
    """
    begin, end = MARKERS[kind]
    secret = set()
    for cell in nb.cells:
        secret.update(_blocks(cell.source, begin, end)[0])
    shown = public_text(nb, kind) + " " + shown_before
    return {line for line in secret if len(line) >= MIN_LENGTH and normalise(line) not in shown}


def public_text(nb, kind: str) -> str:
    """What a source notebook shows outside its ``kind`` blocks, as Markdown renders it (no backticks)."""
    begin, end = MARKERS[kind]
    public = [line for cell in nb.cells for line in _blocks(cell.source, begin, end)[1]]
    return normalise("\n".join(public).replace("`", ""))


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text)


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.parts = []

    def handle_data(self, data):
        self.parts.append(data)


def html_text(html: str) -> str:
    """The text a reader sees in an HTML page (syntax-highlighting spans joined up)."""
    parser = _Text()
    parser.feed(html)
    return normalise("".join(parser.parts))


def leaked(secrets: set[str], text: str) -> list[str]:
    text = normalise(text)
    return sorted(line for line in secrets if normalise(line) in text)
