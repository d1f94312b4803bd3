"""The course's repository name, set once (pyproject.toml [project.urls] Repository), used by every link.

    python tools/repo_links.py show               # print OWNER/NAME
    python tools/repo_links.py set OWNER/NAME     # a fork: change it, and rewrite the docs' links
    python tools/repo_links.py check              # exit 1 if a doc links another repository or a missing file

Links that carry the name: the Binder badge and launch links (mybinder.org/v2/gh/OWNER/NAME/...), the
clone commands (github.com/OWNER/NAME) and Colab links (colab.research.google.com/github/OWNER/NAME/...), in
README.md, docs/ and the notebooks (colab/, solutions/, course/: their cell sources).
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
NAME = r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"
# Each pattern finds the OWNER/NAME of the course's repository in a link; `path` is the file it opens, if any.
LINKS = [
    re.compile(rf"mybinder\.org/v2/gh/(?P<repo>{NAME})/(?P<ref>[^?\s)]+)(?:\?urlpath=lab/tree/(?P<path>[^\s)&]+))?"),
    re.compile(rf'github\.com/(?P<repo>{NAME}?)(?:\.git)?(?=[\s)`/"\\]|$)'),
    re.compile(rf"colab\.research\.google\.com/github/(?P<repo>{NAME})/blob/(?P<ref>[^/]+)/(?P<path>[^\s)]+)"),
]
# Links to other projects, which are not the course's repository.
THIRD_PARTY = {"containers/bubblewrap", "jupyter/nbgrader", "karpathy/nanoGPT"}


def repository() -> str:
    url = tomllib.loads(PYPROJECT.read_text())["project"]["urls"]["Repository"]
    return url.removeprefix("https://github.com/").removesuffix(".git")


def documents() -> list[Path]:
    """The files whose links carry the name: the docs, and the notebooks (the Colab notebook clones the course
    and opens with a badge, as notebook 13 links it)."""
    notebooks = [
        path for folder in ("colab", "solutions", "course") for path in sorted((ROOT / folder).rglob("*.ipynb"))
    ]
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *notebooks]


def links(text: str):
    """(repo, path or None) for each link to a repository in ``text``, third-party projects left out."""
    for pattern in LINKS:
        for match in pattern.finditer(text):
            repo = match["repo"]
            if repo not in THIRD_PARTY:
                yield repo, match.groupdict().get("path")


def written(doc: Path) -> str:
    """What a document's authors wrote: a notebook's cell sources (its outputs quote other projects' code)."""
    if doc.suffix != ".ipynb":
        return doc.read_text()
    return "\n".join("".join(cell["source"]) for cell in json.loads(doc.read_text())["cells"])


def problems() -> list[str]:
    repo, found = repository(), []
    for doc in documents():
        for linked, path in links(written(doc)):
            where = doc.relative_to(ROOT)
            if linked != repo:
                found.append(f"{where}: links {linked}, but the repository is {repo} (pyproject.toml)")
            if path and not (ROOT / path).is_file():
                found.append(f"{where}: a link opens {path}, which does not exist")
    return found


def set_repository(new: str) -> None:
    if not re.fullmatch(NAME, new):
        raise SystemExit(f"not OWNER/NAME: {new!r}")
    old = repository()
    PYPROJECT.write_text(PYPROJECT.read_text().replace(f'https://github.com/{old}"', f'https://github.com/{new}"'))
    for doc in documents():
        text = doc.read_text()
        for prefix in ("mybinder.org/v2/gh/", "github.com/", "colab.research.google.com/github/"):
            text = text.replace(prefix + old, prefix + new)
        doc.write_text(text)


def main(argv: list[str]) -> int:
    if argv[:1] == ["show"]:
        print(repository())
        return 0
    if argv[:1] == ["set"] and len(argv) == 2:
        set_repository(argv[1])
        argv = ["check"]
    if argv[:1] == ["check"]:
        for line in problems():
            print(line)
        return 1 if problems() else 0
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
