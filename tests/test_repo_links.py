"""The repository name is set once (pyproject.toml), and every Binder, clone and Colab link follows it."""

from __future__ import annotations

import shutil
import sys

from notebooks import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import repo_links  # noqa: E402


def test_every_link_names_the_repository_and_opens_a_file_that_exists():
    assert repo_links.problems() == []


def test_the_binder_badge_is_found_and_opens_a_course_notebook():
    found = list(repo_links.links((ROOT / "README.md").read_text()))
    binder = [path for _, path in found if path and path.startswith("course/")]
    assert binder, "README has no Binder link to a course notebook"


def test_check_catches_a_stale_name_and_a_missing_notebook(tmp_path, monkeypatch):
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "[b](https://mybinder.org/v2/gh/someone/else/main?urlpath=lab/tree/course/nope.ipynb)\n"
        "git clone https://github.com/someone/else\n"
    )
    monkeypatch.setattr(repo_links, "ROOT", tmp_path)
    monkeypatch.setattr(repo_links, "PYPROJECT", tmp_path / "pyproject.toml")
    assert len(repo_links.problems()) == 3  # two stale names, one missing file


def test_set_rewrites_pyproject_and_every_link(tmp_path, monkeypatch):
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copy(ROOT / "README.md", tmp_path)
    for folder in ("docs", "course", "colab"):  # copies: set rewrites the notebooks' links too
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, tmp_path / folder)
    monkeypatch.setattr(repo_links, "ROOT", tmp_path)
    monkeypatch.setattr(repo_links, "PYPROJECT", tmp_path / "pyproject.toml")
    before = repo_links.repository()
    repo_links.set_repository("my-school/transformers-2027")
    assert repo_links.repository() == "my-school/transformers-2027"
    assert repo_links.problems() == []
    assert before not in (tmp_path / "README.md").read_text()
    assert before not in (tmp_path / "colab" / "tinystories_colab.ipynb").read_text()
