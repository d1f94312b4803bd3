"""`make hub`'s parts that tests/test_hub.py does not run: the install step and its checks, and the hub's settings.

tests/test_hub.py runs a class on `make hub-start` with this checkout's .venv as the class's environment: building
one at /opt/transformer-course (`make hub-install`, as `make hub` does on first use) installs torch and the lock,
about 1.6 GB and minutes, too slow for every run. So this file checks that step without running it: the commands
make would run (make -n), that pip resolves the hub's packages with the lock to exactly their pins for the Python
the Makefile builds from (a dry run), and the checks that refuse a Python or a place the students' accounts cannot
read. It also runs jupyter/hub/jupyterhub_config.py against a stand-in configuration, as any user: the folders and
modes it makes, and which settings each account's server gets.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from notebooks import ROOT
from traitlets.config import Config

sys.path.insert(0, str(ROOT / "tools"))
import class_hub  # noqa: E402
import envfiles  # noqa: E402

HUB_REQUIREMENTS = ROOT / "jupyter" / "hub" / "requirements.txt"
HUB_PYTHON = "/usr/bin/python3"  # the Makefile's default HUB_PYTHON


def _make(*args: str) -> list[str]:
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.replace("\\\n", " ").splitlines()


def test_make_hub_install_builds_the_environment_where_every_account_can_read_it():
    lines = _make("hub-install", "HUB_PREFIX=/opt/ts-class", "HUB_PYTHON=/usr/bin/python3.11", "TORCH=cpu")
    assert lines[0] == "/usr/bin/python3.11 tools/class_hub.py preflight --prefix /opt/ts-class", lines
    assert "/usr/bin/python3.11 -m venv /opt/ts-class" in lines[1]
    steps = [shlex.split(line.removeprefix("umask 022 && ")) for line in lines if "pip install" in line]
    assert all(line.startswith("umask 022 && ") for line in lines if "pip install" in line or "venv" in line)
    # each install says what it does as it runs (tools/class_hub.py step), then runs pip
    assert [s[:3] for s in steps] == [["/usr/bin/python3.11", "tools/class_hub.py", "step"]] * 3
    assert [s[3] for s in steps][1].startswith("installing torch"), steps
    installs = [s[s.index("--") + 1 :] for s in steps]
    assert [i[:4] for i in installs] == [["/opt/ts-class/bin/python", "-m", "pip", "install"]] * 3
    assert f"torch=={envfiles.lock_pins()['torch']}+cpu" in installs[1]
    course = installs[2]
    assert course[-1] == "." and "-e" not in course, "the course's package installed, not linked to the checkout"
    assert course[course.index("-c") + 1] == "requirements.lock"
    assert course[course.index("-r") + 1] == "jupyter/hub/requirements.txt"
    assert "chmod -R a+rX /opt/ts-class" in lines


def test_make_hub_start_runs_the_repositorys_configuration_from_the_environment():
    lines = _make(
        "hub-start", "HUB_PREFIX=/opt/ts-class", "HUB_URL=http://:9000", "HUB_STUDENTS=s", "HUB_INSTRUCTORS=i"
    )
    assert lines[0] == "/opt/ts-class/bin/python tools/class_hub.py preflight --prefix /opt/ts-class --running"
    start = shlex.split(lines[1])
    assert start[:2] == ["cd", "jupyter/hub"] and "env" in start and "-i" in start
    assert start[-3:] == ["/opt/ts-class/bin/jupyterhub", "-f", "jupyterhub_config.py"]
    assert {"COURSE_HUB_URL=http://:9000", "COURSE_HUB_STUDENTS=s", "COURSE_HUB_INSTRUCTORS=i"} <= set(start)


def test_the_hub_packages_are_pinned_and_only_those_the_lock_lacks():
    hub_pins = envfiles.parse_pins(HUB_REQUIREMENTS.read_text().splitlines())
    assert {"jupyterhub", "configurable-http-proxy"} <= set(hub_pins)
    assert not set(hub_pins) & set(envfiles.lock_pins()), "pinned twice"


@pytest.mark.skipif(not Path(HUB_PYTHON).exists(), reason=f"no {HUB_PYTHON} (the Makefile's HUB_PYTHON) here")
def test_the_hub_packages_resolve_with_the_lock_to_exactly_their_pins(tmp_path):
    """pip (dry run, for the Makefile's HUB_PYTHON) resolves the lock and the hub's packages together to exactly
    their pins: nothing missing, nothing conflicting, nothing unpinned brought in."""
    resolved, said = envfiles.dry_run(ROOT / "requirements.lock", HUB_REQUIREMENTS, python=HUB_PYTHON)
    assert resolved is not None, said[-3:]
    assert resolved == envfiles.lock_pins() | envfiles.parse_pins(HUB_REQUIREMENTS.read_text().splitlines())


def _readable(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


@pytest.fixture
def open_tmp():
    """A scratch folder every account can reach (pytest's tmp_path lies in a folder private to its user)."""
    folder = Path(tempfile.mkdtemp(prefix="ts-preflight-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_preflight_refuses_a_python_or_an_environment_the_students_cannot_read(open_tmp):
    tmp_path = open_tmp
    base = _readable(tmp_path / "open")
    python, stdlib = base / "python3", _readable(base / "lib")
    python.write_text("")
    python.chmod(0o755)
    fine = class_hub.problems(base / "env", running=False, python=python, stdlib=stdlib, root=True)
    assert fine == []
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    said = class_hub.problems(closed / "env", running=False, python=python, stdlib=stdlib, root=True)
    assert len(said) == 1 and "cannot read it" in said[0] and str(closed) in said[0], said
    said = class_hub.problems(base / "env", running=False, python=python, stdlib=closed, root=True)
    assert len(said) == 1 and "standard library" in said[0], said
    said = class_hub.problems(base / "env", running=False, python=python, stdlib=stdlib, root=False)
    assert len(said) == 1 and "root" in said[0], said
    said = class_hub.problems(Path("/root/class-env"), running=False, python=python, stdlib=stdlib, root=True)
    assert any("a home" in problem for problem in said), said
    said = class_hub.problems(base / "env", running=True, python=python, stdlib=stdlib, root=True)
    assert len(said) == 3 and all("make hub-install" in problem for problem in said), said


def _hub_config(tmp_path: Path, instructors: str) -> tuple[Config, Path]:
    state = tmp_path / "hub"
    env = {
        "COURSE_HUB_DIR": str(state),
        "COURSE_EXCHANGE": str(tmp_path / "exchange"),
        "COURSE_HUB_STUDENTS": "ts-no-such-group",
        "COURSE_HUB_INSTRUCTORS": instructors,
    }
    path = ROOT / "jupyter" / "hub" / "jupyterhub_config.py"
    c = Config()
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        exec(compile(path.read_text(), str(path), "exec"), {"get_config": lambda: c, "__file__": str(path)})
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    return c, state


def test_the_hub_configuration_keeps_its_secrets_private_and_gives_each_account_its_settings(tmp_path):
    import grp
    import pwd

    me = pwd.getpwuid(os.getuid())
    my_group = grp.getgrgid(me.pw_gid).gr_name  # my primary group: I am one of its members
    c, state = _hub_config(tmp_path, instructors=my_group)
    assert stat.S_IMODE((state / "private").stat().st_mode) == 0o700
    assert c.JupyterHub.db_url == f"sqlite:///{state / 'private' / 'jupyterhub.sqlite'}"
    assert Path(c.JupyterHub.cookie_secret_file).parent == state / "private"
    assert stat.S_IMODE((tmp_path / "exchange").stat().st_mode) == 0o1777
    settings = state / "settings"
    for path in [settings, *settings.rglob("*")]:
        assert path.stat().st_mode & (stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0)), path
    assert (settings / "students" / "labconfig" / "page_config.json").is_file()
    assert c.Authenticator.admin_users == set() and c.PAMAuthenticator.admin_groups == set()
    assert c.PAMAuthenticator.allowed_groups == {"ts-no-such-group", my_group}
    assert c.ConfigurableHTTPProxy.command == [str(Path(sys.prefix) / "bin" / "configurable-http-proxy")]
    assert c.Spawner.cmd == [str(Path(sys.prefix) / "bin" / "jupyterhub-singleuser")]
    path_of = c.Spawner.environment["JUPYTER_CONFIG_PATH"]
    instructor = path_of(SimpleNamespace(user=SimpleNamespace(name=me.pw_name))).split(os.pathsep)
    student = path_of(SimpleNamespace(user=SimpleNamespace(name="ts-not-an-instructor"))).split(os.pathsep)
    assert instructor == [str(settings / s) for s in ("instructors", "students", "class")]
    assert student == [str(settings / s) for s in ("students", "class")]
    # nothing of the hub's own environment (its proxy token) reaches a user's server
    assert not {key for key in c.Spawner.environment if "TOKEN" in key or "SECRET" in key}


def test_a_long_install_step_says_what_it_does_as_it_runs():
    """Issue 52 §5: `make hub`'s quiet pip steps ran 13 and 93 s with nothing on the screen."""
    done = subprocess.run(
        [sys.executable, "tools/class_hub.py", "step", "--every", "0.3", "installing nothing", "--", "sleep", "1.2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0] == "make hub: installing nothing...", lines
    assert sum("installing nothing, " in line and "s so far" in line for line in lines) >= 2, lines
    assert re.fullmatch(r"make hub: installing nothing: done in \d+ s", lines[-1]), lines
    failed = subprocess.run(
        [sys.executable, "tools/class_hub.py", "step", "failing", "--", "false"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 1 and "failing: failed (exit status 1)" in failed.stdout, failed
