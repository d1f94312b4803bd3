"""Issue 52 §1: grades go only to the course's gradebook, whatever the order in which the instructor set things up.

On the hub, docs/instructors.md has the instructor clone ~/transformer-course from a terminal of their running
server. formgrader fixes its course folder and gradebook when the server starts and reads the settings again on
each request, so a server started before the clone kept ~/gradebook.db: collect filled that second gradebook with
the students and every autograde failed ("No assignment with ID ... exists"). Two things now hold, each checked
here without a server (tests/test_hub.py follows the guide's order in a browser on a real hub):

- the instructors' settings (jupyter/hub/instructors/nbgrader_config.py) name the course's root and gradebook
  whether or not the folder exists yet, so formgrader's gradebook is the course's from the start;
- a collect or an autograde whose gradebook is not the one the configuration names as it runs refuses, saying why,
  and writes no gradebook (``gradebook_refusal``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from notebooks import ROOT, read, release_path
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograder.nbgrader_plugin import TrustedVerdict, WrongGradebook, gradebook_refusal

INSTRUCTORS = ROOT / "jupyter" / "hub" / "instructors" / "nbgrader_config.py"
NOTEBOOK = "02_normalization"


def _instructors_settings(home: Path, monkeypatch) -> Config:
    """The instructors' nbgrader settings, as their server reads them with HOME=``home``, from a copy of
    jupyter/hub/instructors/ with the course's settings beside it, as jupyterhub_config.py makes it."""
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("COURSE_FOLDER", raising=False)
    settings = home.parent / f"{home.name}-hub-settings"
    if not settings.exists():
        shutil.copytree(INSTRUCTORS.parent, settings)
        shutil.copy(ROOT / "nbgrader_config.py", settings / "course_nbgrader_config.py")
    return PyFileConfigLoader(INSTRUCTORS.name, path=str(settings)).load_config()


def _course_settings(course: Path) -> Config:
    (course / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    return PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()


def test_the_instructors_settings_name_the_course_gradebook_before_the_course_exists(tmp_path, monkeypatch):
    from nbgrader.coursedir import CourseDirectory

    course = tmp_path / "transformer-course"
    started = _instructors_settings(tmp_path, monkeypatch)  # the server starts: no course folder yet
    before = CourseDirectory(config=started)
    assert before.root == str(course) and before.db_url == f"sqlite:///{course / 'gradebook.db'}"
    assert started.TrustedVerdict.timeout == 30  # the course's grading settings, from the hub's copy
    course.mkdir()
    _course_settings(course)  # the clone
    (course / "nbgrader_config.py").write_text(
        (course / "nbgrader_config.py").read_text() + "\nc.TrustedVerdict.timeout = 45  # the instructor's own\n"
    )
    after = _instructors_settings(tmp_path, monkeypatch)  # a request after the clone reads the clone's settings
    assert after.TrustedVerdict.timeout == 45
    assert CourseDirectory(config=after).db_url == before.db_url
    assert gradebook_refusal(before.db_url, after) is None


def _stale_server(tmp_path: Path):
    """What a server started in the home before the clone holds (the old instructors' settings, which named no
    course when the folder was missing: the home's gradebook), and the course's settings read since."""
    from nbgrader.coursedir import CourseDirectory

    home, course = tmp_path, tmp_path / "transformer-course"
    course.mkdir()
    stale = CourseDirectory(root=str(home))
    assert stale.db_url == f"sqlite:///{home / 'gradebook.db'}"
    return home, stale, _course_settings(course)


def test_collect_into_another_gradebook_refuses_before_it_opens_one(tmp_path, monkeypatch):
    from nbgrader.auth import Authenticator
    from nbgrader.exchange import ExchangeError

    from autograder.exchange import OwnerCheckedCollect

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    home, stale, settings = _stale_server(tmp_path)
    (tmp_path / "exchange" / "transformer-from-scratch" / "inbound").mkdir(parents=True)
    stale.assignment_id = NOTEBOOK
    collect = OwnerCheckedCollect(
        coursedir=stale, authenticator=Authenticator(), config=settings, root=str(tmp_path / "exchange")
    )
    with pytest.raises(ExchangeError) as refused:
        collect.start()
    said = str(refused.value)
    assert f"refusing to write grades to {stale.db_url}" in said, said
    assert f"names the gradebook sqlite:///{home / 'transformer-course' / 'gradebook.db'}" in said
    assert "Stop My Server" in said
    assert not (home / "gradebook.db").exists() and not (home / "transformer-course" / "gradebook.db").exists()


def test_autograde_into_another_gradebook_refuses_and_touches_no_gradebook(tmp_path):
    home, stale, settings = _stale_server(tmp_path)
    resources = {
        "nbgrader": {"db_url": stale.db_url, "assignment": NOTEBOOK, "student": "alice", "notebook": NOTEBOOK},
        "metadata": {"path": str(tmp_path)},
    }
    verdict = TrustedVerdict(config=settings)
    with pytest.raises(WrongGradebook, match="refusing to write grades to"):
        verdict.preprocess(read(release_path(NOTEBOOK)), resources)
    assert not (home / "gradebook.db").exists()
    assert not list((home / "transformer-course").glob("*.db"))


def test_a_collect_or_grading_configured_with_no_course_is_not_held_to_one():
    assert gradebook_refusal("sqlite:////anywhere/gradebook.db", Config()) is None


def test_control_the_course_settings_alone_name_their_own_folder(tmp_path):
    settings = _course_settings(tmp_path)
    assert gradebook_refusal(f"sqlite:///{tmp_path / 'gradebook.db'}", settings) is None
    assert gradebook_refusal(f"sqlite:///{tmp_path / 'elsewhere.db'}", settings) is not None
