"""The browser libraries that travel with the course are the pinned files, with their licences.

coursetools/static holds require.js, d3 and jQuery for the attention views, and MathJax for the
feedback (copied once from the npm registry's tarballs, see its SOURCES.md). Every file there must
match the sha256 pinned in SHA256SUMS, every library needs its licence text, and an installed
(non-editable) package must carry them all.
"""

from __future__ import annotations

import hashlib
import shutil
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from notebooks import ROOT

from autograder import nbgrader_plugin
from coursetools.attention_view import LIBRARIES, STATIC

PAPERWORK = {"SHA256SUMS", "SOURCES.md"}
MATHJAX = "mathjax-tex-svg-full.js"
# What each file says about itself, independently of the pinned sums: the versions bertviz is run with, in the
# first lines; MathJax has no banner, and states its version once, deep in the file.
BANNERS = {
    "require.js": "RequireJS 2.3.6",
    "d3.min.js": "https://d3js.org v5.7.0",
    "jquery.min.js": "jQuery v2.2.4 ",
    MATHJAX: 'e.VERSION="3.2.2"',
}
WITHOUT_BANNER = {MATHJAX}
LICENCES = {
    "require.js": ("LICENSE-requirejs.txt", "Permission is hereby granted"),
    "d3.min.js": ("LICENSE-d3.txt", "Redistribution and use in source and binary forms"),
    "jquery.min.js": ("LICENSE-jquery.txt", "Permission is hereby granted"),
    MATHJAX: ("LICENSE-mathjax.txt", "Licensed under the Apache License, Version 2.0"),
}


def pinned(directory: Path) -> dict[str, str]:
    """{file name: sha256} from ``sha256sum``'s output format."""
    sums = {}
    for line in (directory / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name.lstrip("*")] = digest
    return sums


def problems(directory: Path) -> list[str]:
    """Everything wrong with a static folder: unpinned, missing, altered or unlicensed files."""
    sums = pinned(directory)
    present = {p.name for p in directory.iterdir() if p.is_file()} - PAPERWORK
    found = [f"{name}: not in SHA256SUMS" for name in sorted(present - sums.keys())]
    found += [f"{name}: missing" for name in sorted(sums.keys() - present)]
    for name in sorted(present & sums.keys()):
        if hashlib.sha256((directory / name).read_bytes()).hexdigest() != sums[name]:
            found.append(f"{name}: sha256 differs from SHA256SUMS")
    for library, (licence, phrase) in LICENCES.items():
        if licence not in sums or licence not in present:
            found.append(f"{library}: its licence {licence} is missing")
        elif phrase not in (directory / licence).read_text():
            found.append(f"{library}: {licence} lacks its licence text")
        text = (directory / library).read_text(encoding="utf-8") if library in present else ""
        if BANNERS[library] not in (text if library in WITHOUT_BANNER else text[:400]):
            found.append(f"{library}: not {BANNERS[library].strip()}")
    return found


def test_vendored_files_match_their_pins_and_licences():
    assert problems(STATIC) == []


def test_attention_view_reads_the_vendored_files():
    assert {path.name for path in LIBRARIES.values()} == set(LICENCES) - {MATHJAX}
    assert all(path.parent == STATIC and path.is_file() for path in LIBRARIES.values())


def test_the_feedback_inlines_the_vendored_mathjax():
    """nbgrader_config.py's feedback template inlines MathJax from this folder, whole (tests/test_nbgrader_e2e.py
    renders a feedback with it)."""
    assert nbgrader_plugin.STATIC == STATIC
    template = (nbgrader_plugin.TEMPLATES / "feedback" / "mathjax.html.j2").read_text()
    assert f'"{MATHJAX}" | course_script' in template
    assert (
        nbgrader_plugin.course_script(MATHJAX) == f"<script>{(STATIC / MATHJAX).read_text(encoding='utf-8')}</script>"
    )


def test_sources_lists_the_pinned_sums():
    """SOURCES.md, which people read, states the same sha256 as SHA256SUMS for each library."""
    sources = (STATIC / "SOURCES.md").read_text()
    for name in LICENCES:
        rows = [line for line in sources.splitlines() if line.startswith(f"| `{name}` |")]
        assert len(rows) == 1 and pinned(STATIC)[name] in rows[0], f"SOURCES.md's row for {name}"


def test_the_check_rejects_wrong_files(tmp_path):
    """A newer d3, an edited jQuery, a lost licence and an unpinned extra file are each reported."""

    def copy() -> Path:
        target = tmp_path / f"static{len(list(tmp_path.iterdir()))}"
        shutil.copytree(STATIC, target)
        return target

    newer = copy()
    (newer / "d3.min.js").write_text("// https://d3js.org v5.16.0 Copyright 2020 Mike Bostock\n!function(){}();\n")
    assert problems(newer) == ["d3.min.js: sha256 differs from SHA256SUMS", "d3.min.js: not https://d3js.org v5.7.0"]
    edited = copy()
    with open(edited / "jquery.min.js", "a") as f:
        f.write("\n")
    assert problems(edited) == ["jquery.min.js: sha256 differs from SHA256SUMS"]
    unlicensed = copy()
    (unlicensed / "LICENSE-d3.txt").unlink()
    assert problems(unlicensed) == ["LICENSE-d3.txt: missing", "d3.min.js: its licence LICENSE-d3.txt is missing"]
    extra = copy()
    (extra / "jquery-3.7.1.min.js").write_text("/*! jQuery v3.7.1 */")
    assert problems(extra) == ["jquery-3.7.1.min.js: not in SHA256SUMS"]
    other_mathjax = copy()
    (other_mathjax / MATHJAX).write_text('(function(){e.VERSION="3.2.1"})();')
    assert problems(other_mathjax) == [
        f"{MATHJAX}: sha256 differs from SHA256SUMS",
        f'{MATHJAX}: not e.VERSION="3.2.2"',
    ]


def test_an_installed_package_carries_them():
    """pyproject's package-data covers every file of the folder, and the feedback's template (a wheel has them)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    folders = {"coursetools": STATIC, "autograder": nbgrader_plugin.TEMPLATES}
    for package, folder in folders.items():
        files = [path for path in folder.rglob("*") if path.is_file()]
        assert files
        for path in files:
            relative = path.relative_to(folder.parent).as_posix()
            assert any(fnmatch(relative, glob) for glob in data.get(package, [])), (
                f"{relative} would be left out of the wheel"
            )
