"""Students get no instructor tools and no news pop-up, in `make lab` and on Binder.

jupyter/student/ holds the settings; `make lab` puts it on JUPYTER_CONFIG_PATH, and binder/postBuild merges it
into its environment (tools/student_settings.py). Here postBuild runs for real in a scratch prefix, and the
settings it leaves are read back by the functions JupyterLab and Jupyter Server read them with.
(tests/test_student_session.py checks the same in a real browser.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

from notebooks import ROOT

STUDENT = ROOT / "jupyter" / "student"
VENV_JUPYTER = Path(sys.prefix) / "etc" / "jupyter"
LABEXTENSION = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "@jupyter" / "nbgrader"
# The instructor's tools (nbgrader 0.9.6's plugin and server-extension names): all off for students.
# The menu plugin stays: it then lists only "Assignment List", the commands of the others being absent.
INSTRUCTOR_PLUGINS = {
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:course-list",
}
STUDENT_PLUGINS = {
    "@jupyter/nbgrader:menu",
    "@jupyter/nbgrader:assignment-list",
    "@jupyter/nbgrader:validate-assignment",
}
INSTRUCTOR_SERVER = {"nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"}
# The course's own: the Assignment List says in one line that there is no exchange (coursetools/assignment_list.py).
COURSE_SERVER = "coursetools.assignment_list"
NEWS = "@jupyterlab/apputils-extension:notification"


def _settings(name: str) -> dict:
    return json.loads((STUDENT / name).read_text())


def test_student_settings_name_real_plugins_and_extensions():
    """A misspelt id would disable nothing, silently: every id must be one that nbgrader installs."""
    bundle = "".join(p.read_text(errors="replace") for p in (LABEXTENSION / "static").glob("*.js"))
    plugin_ids = {
        f"@jupyter/nbgrader:{name}"
        for name in (
            "create-assignment",
            "formgrader",
            "course-list",
            "menu",
            "assignment-list",
            "validate-assignment",
        )
    }
    assert all(f'"{plugin}"' in bundle for plugin in plugin_ids), "nbgrader's plugin ids changed"
    page = _settings("labconfig/page_config.json")
    assert {k for k, v in page["disabledExtensions"].items() if v} == INSTRUCTOR_PLUGINS
    assert {k for k, v in page["lockedExtensions"].items() if v} == INSTRUCTOR_PLUGINS
    shipped = json.loads((VENV_JUPYTER / "jupyter_server_config.d" / "nbgrader.json").read_text())
    server = _settings("jupyter_server_config.json")["ServerApp"]["jpserver_extensions"]
    assert server == {**dict.fromkeys(INSTRUCTOR_SERVER, False), COURSE_SERVER: True}
    assert INSTRUCTOR_SERVER < set(shipped["ServerApp"]["jpserver_extensions"])
    overrides = _settings("labconfig/default_setting_overrides.json")
    assert overrides == {NEWS: {"fetchNews": "false", "checkForUpdates": False}}


def test_make_lab_serves_with_the_student_settings():
    dry = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            "-C",
            str(ROOT),
            "lab",
            "LAB_DIR=/some/copy",
            "LAB_ARGS=--port=8999",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "JUPYTER_CONFIG_PATH"},
    ).stdout
    (command,) = [line for line in dry.replace("\\\n", " ").splitlines() if "jupyter lab" in line]
    assert f'JUPYTER_CONFIG_PATH="{STUDENT}"' in command
    # The server runs in the lab's root, where its terminals open (tests/test_student_session.py types a command
    # into one); jupyter/student/jupyter_server_config.py is what gives them the course's Python.
    assert command.startswith('cd "/some/copy" && ')
    assert command.rstrip().endswith('--ServerApp.root_dir="$PWD" --LabApp.default_url=/lab/tree/course --port=8999')


# Run inside the scratch environment: what the server and JupyterLab would read there, as JSON.
_PROBE = textwrap.dedent("""
    import json, os, sys
    from jupyter_server.serverapp import ServerApp
    from jupyterlab_server.config import get_page_config
    from jupyterlab_server.settings_utils import get_settings

    def on(ids):  # the page config holds lists or {id: bool} dicts
        return sorted(ids if isinstance(ids, list) else [k for k, v in ids.items() if v])

    server = ServerApp()
    server.load_config_file()  # runs jupyter_server_config.py where there is one: it may set PATH
    server.find_server_extensions()
    page = get_page_config([sys.argv[1]])
    news, _ = get_settings(sys.argv[2], sys.argv[3], sys.argv[4], schema_name=sys.argv[5])
    print(json.dumps({
        "prefix": sys.prefix,
        "server_extensions": {k: bool(v) for k, v in server.jpserver_extensions.items()},
        "disabled": on(page["disabledExtensions"]),
        "locked": on(page.get("lockedExtensions", [])),
        "news_defaults": {k: news["schema"]["properties"][k]["default"] for k in ("fetchNews", "checkForUpdates")},
        "terminal_shell": server.terminado_settings.get("shell_command"),
        "path_first": os.environ["PATH"].split(os.pathsep)[0],
    }))
""")


def _scratch_environment(tmp_path: Path) -> tuple[Path, dict]:
    """A Python whose sys.prefix is a temp dir, seeing this venv's packages, with pip stubbed.

    Its etc/jupyter starts as this venv's, i.e. as pip left Binder's environment (nbgrader's own
    jupyter_server_config.d/nbgrader.json enabling formgrader), plus a page_config.json that another
    package might have written, which postBuild must keep.
    """
    prefix = tmp_path / "prefix"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=60)
    purelib = Path(sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})["purelib"])
    (purelib / "course_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    shutil.copytree(VENV_JUPYTER, prefix / "etc" / "jupyter")
    labconfig = prefix / "etc" / "jupyter" / "labconfig"
    labconfig.mkdir(exist_ok=True)
    (labconfig / "page_config.json").write_text(json.dumps({"disabledExtensions": {"some-other:plugin": True}}))
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    pip = stubs / "pip"  # installs are proven elsewhere (the dry-run resolution); here only recorded
    pip.write_text(f'#!/bin/sh\necho "pip $*" >> "{tmp_path}/calls.log"\n')
    pip.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(
        PATH=f"{prefix / 'bin'}:{stubs}:{os.environ['PATH']}",
        JUPYTER_CONFIG_DIR=str(tmp_path / "user"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
    )
    return prefix, env


def _probe(prefix: Path, env: dict, tmp_path: Path) -> dict:
    lab = Path(sys.prefix) / "share" / "jupyter"
    done = subprocess.run(
        [
            prefix / "bin" / "python",
            "-c",
            _PROBE,
            str(lab / "labextensions"),
            str(prefix / "share" / "jupyter" / "lab" / "settings"),
            str(lab / "lab" / "schemas"),
            str(tmp_path / "user-settings"),
            NEWS,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_binder_postbuild_in_a_scratch_prefix(tmp_path):
    prefix, env = _scratch_environment(tmp_path)
    env["PATH"] = f"{tmp_path / 'stubs'}:{env['PATH']}"  # another folder before the environment's bin/ on PATH
    before = _probe(prefix, env, tmp_path)
    assert before["prefix"] == str(prefix)
    # The control: as pip leaves it, the environment offers the instructor's tools and asks about news.
    assert before["server_extensions"]["nbgrader.server_extensions.formgrader"] is True
    assert not INSTRUCTOR_PLUGINS & set(before["disabled"]) and before["news_defaults"]["fetchNews"] == "none"
    assert before["terminal_shell"] is None and before["path_first"] == str(tmp_path / "stubs"), "as pip left it"

    done = subprocess.run(
        [ROOT / "binder" / "postBuild"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "pip install --no-deps -e ." in (tmp_path / "calls.log").read_text()

    after = _probe(prefix, env, tmp_path)
    extensions = after["server_extensions"]
    assert all(extensions[name] is False for name in INSTRUCTOR_SERVER), extensions
    assert extensions["nbgrader.server_extensions.assignment_list"] is True
    assert extensions["nbgrader.server_extensions.validate_assignment"] is True
    assert extensions[COURSE_SERVER] is True and COURSE_SERVER not in before["server_extensions"]
    assert set(after["disabled"]) == INSTRUCTOR_PLUGINS | {"some-other:plugin"}, "kept what was there"
    assert INSTRUCTOR_PLUGINS <= set(after["locked"]) and not STUDENT_PLUGINS & set(after["disabled"])
    assert after["news_defaults"] == {"fetchNews": "false", "checkForUpdates": False}
    written = prefix / "etc" / "jupyter"
    # Terminals: bash, not a login shell, with the students' start-up file, installed beside the config; the
    # environment's bin/ first on the server's PATH (terminals inherit it; terminal.bashrc puts it first again).
    assert after["terminal_shell"] == [shutil.which("bash"), "--rcfile", str(written / "terminal.bashrc")], after
    assert (written / "terminal.bashrc").read_text() == (STUDENT / "terminal.bashrc").read_text()
    assert after["path_first"] == str(prefix / "bin"), after
    assert json.loads((written / "labconfig" / "page_config.json").read_text())["lockedExtensions"] == dict.fromkeys(
        sorted(INSTRUCTOR_PLUGINS), True
    )


def test_student_settings_install_is_idempotent(tmp_path):
    script = ROOT / "tools" / "student_settings.py"
    for _ in range(2):
        done = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, check=True)
    assert done.stdout.count("student settings: ") == 5
    assert json.loads((tmp_path / "jupyter_server_config.json").read_text()) == _settings("jupyter_server_config.json")
    python = (tmp_path / "jupyter_server_config.py").read_text()
    assert python.count((STUDENT / "jupyter_server_config.py").read_text().strip()) == 1, "one block, not two"


def test_student_settings_keep_an_existing_python_config(tmp_path):
    """A jupyter_server_config.py that was there keeps its lines; ours is added once, as a marked block."""
    theirs = "c = get_config()\nc.ServerApp.iopub_data_rate_limit = 10000000\n"
    (tmp_path / "jupyter_server_config.py").write_text(theirs)
    script = ROOT / "tools" / "student_settings.py"
    for _ in range(2):
        subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, check=True)
    python = (tmp_path / "jupyter_server_config.py").read_text()
    assert python.startswith(theirs)
    assert python.count((STUDENT / "jupyter_server_config.py").read_text().strip()) == 1


def test_the_assignment_list_says_one_line_where_there_is_no_exchange():
    """nbgrader's error for a missing exchange becomes NO_EXCHANGE; every other answer passes unchanged.
    (tests/test_student_session.py asks a real `make lab`, and a plain `jupyter lab` for nbgrader's own text.)"""
    import asyncio
    from types import SimpleNamespace

    from nbgrader.server_extensions.assignment_list.handlers import AssignmentList

    from coursetools import assignment_list as course

    missing = {
        "success": False,
        "value": """The exchange directory does not exist and could
                                    not be created. The "release" and "collect" functionality will not be available.""",
    }
    listed = {"success": True, "value": [{"course_id": "course101", "assignment_id": "02_normalization"}]}
    other = {"success": False, "value": "Traceback (most recent call last): ..."}

    class Manager(AssignmentList):  # nbgrader's manager, answering as it does without, and with, an exchange
        def __init__(self, answer):
            super().__init__()
            self.answer = answer

        def list_courses(self):
            return self.answer

        def list_assignments(self, course_id=None):
            return self.answer

    settings = {"assignment_list_manager": Manager(missing)}
    server = SimpleNamespace(web_app=SimpleNamespace(settings=settings), log=SimpleNamespace(info=print))
    assert course._jupyter_server_extension_points() == [{"module": COURSE_SERVER}]
    asyncio.run(course._start_jupyter_server_extension(server))
    asyncio.run(course._start_jupyter_server_extension(server))  # once wrapped, left as it is
    manager = settings["assignment_list_manager"]
    assert isinstance(manager, course.FriendlyAssignmentList) and isinstance(manager._manager, Manager)
    expected = {"success": False, "value": course.NO_EXCHANGE}
    assert manager.list_courses() == expected and manager.list_assignments("course101") == expected
    assert "\n" not in course.NO_EXCHANGE and len(course.NO_EXCHANGE) < 150
    for answer in (listed, other):
        manager._manager.answer = answer
        assert manager.list_courses() == answer and manager.list_assignments("course101") == answer
    assert manager.fetch_assignment.__func__ is Manager.fetch_assignment  # the rest is nbgrader's
