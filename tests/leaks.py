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


def secret_lines(nb, kind: str) -> set[str]:
    """Lines inside the ``kind`` blocks of a source notebook that it shows nowhere else.

    A line the notebook also shows in public (an exercise's instructions quote
    ``x32 = x.float()``, say) gives nothing away, so it is not a secret.
    """
    begin, end = MARKERS[kind]
    secret, public = set(), []
    for cell in nb.cells:
        kept, visible = _blocks(cell.source, begin, end)
        secret.update(kept)
        public += visible
    public_text = normalise("\n".join(public).replace("`", ""))  # as Markdown renders it: no backticks
    return {line for line in secret if len(line) >= MIN_LENGTH and normalise(line) not in public_text}


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
