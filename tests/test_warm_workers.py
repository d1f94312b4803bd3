"""Workers forked from the grader's zygote (``autograder/zygote.py``) are as confined as a cold start.

A worker that bubblewrap started itself (a cold start) holds no capability, runs with ``no_new_privs``, in its
own session and PID namespace, with the sandbox's environment and no file descriptor but its pipes. A warm
worker is a fork of a process bubblewrap never saw, that then joined the sandbox's namespaces: these tests run
student code in one and look at each of those, as root (CI) and as an ordinary account, then check that one
zygote serves submission after submission without one seeing another's files, and that where a sandbox
cannot be joined, or a zygote forgot to drop a capability (which the worker's own check catches), grading
starts workers cold instead of failing or going on. The attacks of ``tests/attacks.py`` run on
warm workers too, through the command line and nbgrader (``test_sandbox.py``, ``test_nbgrader_e2e.py``).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from attacks import sleepers
from notebooks import ROOT
from test_multiuser_exchange import accounts, as_user  # noqa: F401 - accounts is a fixture

from autograder import zygote
from autograder.notebooks import WORKER_IMPORTS
from autograder.process import Worker
from autograder.sandbox import Limits, Sandbox, unavailable_reason

ADAPTERS = "autograder.notebooks.nb00_welcome"

# Student code: what its process holds and sees, as JSON on one line.
LOOK = r"""
import ctypes, errno, json, os
def status():
    try:
        lines = open("/proc/self/status").read().splitlines()
    except PermissionError:  # as root the worker switched user, which makes /proc/self root's: ask the kernel
        return None
    return {k: v.strip() for k, v in (l.split(":", 1) for l in lines if ":" in l)}
libc = ctypes.CDLL(None, use_errno=True)
unmounted = {}
for folder in ("/home", "/tmp", "/run"):
    unmounted[folder] = libc.umount2(folder.encode(), 2) == 0 or errno.errorcode[ctypes.get_errno()]
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
print(json.dumps({
    "status": status(),
    "uid": os.getuid(),
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "session_leader": os.getsid(0) == os.getpid(),
    "fds": [fd for fd in range(1024) if is_open(fd)],
    "environment": sorted(os.environ),
    "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "unmounted": unmounted,
    "cwd_files": sorted(os.listdir(".")),
}))
"""


def _require_sandbox():
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"needs bubblewrap: {reason}")


def look(folder: Path, extra: str = "") -> tuple[dict, Worker]:
    """Start a worker in a sandbox of ``folder`` as grading does, run ``extra`` then LOOK in it; (what it saw, it)."""
    with Sandbox(folder, None, [], Limits()) as sandbox:
        worker = Worker(sandbox).ready(ADAPTERS)
        try:
            reply = worker.request({"op": "exec", "index": 0, "source": extra + LOOK, "record": True}, 60, "looking")
            assert reply["ok"], reply
            printed = "".join(o.get("text", "") for o in reply["outputs"] if o["output_type"] == "stream")
            return json.loads(printed.strip().splitlines()[-1]), worker
        finally:
            worker.kill()


def _folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    tmp_path.chmod(0o755)
    folder.chmod(0o755)  # as root, student code runs as another user
    return folder


def _assert_confined(seen: dict, environment: list[str]) -> None:
    if seen["status"] is not None:  # unprivileged: its /proc/self is readable
        for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(seen["status"][field], 16) == 0, (field, seen["status"][field])
        assert seen["status"]["NoNewPrivs"] == "1"
    assert seen["uid"] != 0
    assert seen["ppid"] == 0 and seen["pid"] <= 3, "not in the sandbox's own PID namespace"
    assert seen["session_leader"], "not in a session of its own (bubblewrap's --new-session)"
    assert len(seen["fds"]) == 5, f"file descriptors beyond stdin, stdout, stderr and its two pipes: {seen['fds']}"
    assert seen["environment"] == environment
    assert seen["processes"] == sorted(seen["processes"]) and max(seen["processes"]) <= 3 + 2, seen["processes"]
    assert all(result == "EPERM" for result in seen["unmounted"].values()), seen["unmounted"]


def test_a_forked_worker_holds_no_privilege_and_sees_only_its_sandbox(tmp_path):
    _require_sandbox()
    folder = _folder(tmp_path, "submission")
    seen, worker = look(folder)
    assert isinstance(worker.process, zygote.WarmProcess), f"started cold here: {zygote.why_cold()}"
    with Sandbox(folder, None, [], Limits()) as sandbox:
        environment = sorted(sandbox.environment())
    _assert_confined(seen, environment)
    if os.geteuid() == 0:  # root: the worker switched to the sandbox's own user, which the kernel then checks
        assert seen["uid"] >= 200_000


def test_one_zygote_serves_each_submission_and_none_sees_another(tmp_path):
    _require_sandbox()
    first, second = _folder(tmp_path, "first"), _folder(tmp_path, "second")
    (first / "notebook.ipynb").write_text("{}")
    seen, worker = look(first, "open('left_behind.txt', 'w').write('secret')\n")
    assert "left_behind.txt" in seen["cwd_files"]
    zygotes = {z.process.pid for z in zygote._ZYGOTES.values()}
    seen, worker = look(second)
    assert isinstance(worker.process, zygote.WarmProcess)
    assert seen["cwd_files"] == [".ipython"], "a submission saw another's files"
    assert not (first / "left_behind.txt").exists(), "the scratch copy leaked into the submission folder"
    assert {z.process.pid for z in zygote._ZYGOTES.values()} == zygotes, "a second zygote started"


def _imported(folder: Path, imports: tuple[str, ...], modules: tuple[str, ...]) -> list[bool]:
    """Whether each of ``modules`` is imported, before any student code, in a worker started with ``imports``."""
    with Sandbox(folder, None, [], Limits()) as sandbox:
        worker = Worker(sandbox, imports).ready(ADAPTERS)
        try:
            source = f"import json, sys\nprint(json.dumps([m in sys.modules for m in {list(modules)!r}]))\n"
            reply = worker.request({"op": "exec", "index": 0, "source": source, "record": True}, 60, "looking")
            assert reply["ok"], reply
            return json.loads(reply["outputs"][0]["text"])
        finally:
            worker.kill()


@pytest.mark.parametrize("cold", [False, True], ids=["forked", "cold"])
def test_a_worker_starts_with_its_own_notebooks_imports_and_no_other(tmp_path, monkeypatch, cold):
    """A worker for a notebook that declares Hugging Face's models (``WORKER_IMPORTS``) starts with them imported,
    forked from a zygote or started cold; a worker for a notebook that declares none, started after it by the same
    grader process, starts without them: what a grade can depend on is its own notebook's."""
    _require_sandbox()
    if cold:
        monkeypatch.setenv(zygote.COLD_ENV, "1")
    hugging_face = WORKER_IMPORTS["08_decoder_models"]
    assert "04_attention" not in WORKER_IMPORTS
    assert _imported(_folder(tmp_path, "08"), hugging_face, hugging_face) == [True]
    assert _imported(_folder(tmp_path, "04"), (), hugging_face) == [False]


# Module globals that name a folder; printed as JSON (module, name) pairs, with the temporary folder.
NAMED_FOLDERS = r"""
import json, pathlib, sys, tempfile
__folder = {folder!r}
def __names(value):
    if isinstance(value, (str, pathlib.PurePath)):
        return __folder in str(value)
    return isinstance(value, (list, tuple)) and any(isinstance(v, (str, pathlib.PurePath)) and __folder in str(v) for v in value)
print(json.dumps({{
    "found": sorted({{(name, key) for name, module in list(sys.modules.items()) for key, value in list(vars(module).items())
                     if not key.startswith("__") and __names(value)}}),
    "temporary": tempfile.gettempdir(),
}}))
"""

# What names the zygote's own folder (its HOME and working folder) in a forked worker, none of it used in grading:
# the zygote's command line (autograder/zygote.py's docstring), matplotlib's user font and style folders, site's
# user site (ignored: -I), multiprocessing's starting folder, huggingface_hub's default home (unused: HF_HOME is
# set) and the path transformers' docstring tooling reads.
HARMLESS_ZYGOTE_PATHS = {
    ("sys", "orig_argv"),
    ("matplotlib.font_manager", "_HOME"),
    ("matplotlib.font_manager", "MSUserFontDirectories"),
    ("matplotlib.font_manager", "OSXFontDirectories"),
    ("matplotlib.font_manager", "X11FontDirectories"),
    ("matplotlib.style", "USER_LIBRARY_PATHS"),
    ("site", "USER_SITE"),
    ("site", "USER_BASE"),
    ("multiprocessing.process", "ORIGINAL_DIR"),
    ("huggingface_hub.constants", "default_home"),
    ("transformers.utils.auto_docstring", "PATH_TO_TRANSFORMERS"),
}


def test_a_forked_worker_holds_no_path_of_its_zygotes_folder(tmp_path):
    """A zygote imports with its own HOME and TMPDIR (its folder, which no sandbox shows); what those imports fix
    from them (``tempfile.tempdir``, Hugging Face's cache and token paths) must not reach its workers, which would
    then use paths that a cold worker does not. Scanned: every loaded module's globals, in a worker forked from the
    Hugging Face notebooks' zygote."""
    _require_sandbox()
    folder = _folder(tmp_path, "08")
    hugging_face = WORKER_IMPORTS["08_decoder_models"]
    with Sandbox(folder, None, [], Limits()) as sandbox:
        worker = Worker(sandbox, hugging_face).ready(ADAPTERS)
        try:
            assert isinstance(worker.process, zygote.WarmProcess), f"started cold here: {zygote.why_cold()}"
            (home,) = [z.home for key, z in zygote._ZYGOTES.items() if key[1] == hugging_face]
            source = NAMED_FOLDERS.format(folder=home)
            reply = worker.request({"op": "exec", "index": 0, "source": source, "record": True}, 60, "looking")
            assert reply["ok"], reply
            seen = json.loads(reply["outputs"][0]["text"])
        finally:
            worker.kill()
    assert {tuple(pair) for pair in seen["found"]} <= HARMLESS_ZYGOTE_PATHS, seen["found"]
    assert seen["temporary"] == str(folder), seen["temporary"]


def test_as_an_ordinary_account_a_forked_worker_holds_no_privilege(accounts, tmp_path):  # noqa: F811
    _require_sandbox()
    user = accounts.add("grader")
    folder = Path(f"/tmp/ts-warm-{accounts.tag}")
    folder.mkdir(mode=0o755)
    try:
        os.chown(folder, *_ids(user))
        script = (
            f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
            "from pathlib import Path\nfrom test_warm_workers import look\nfrom autograder import zygote\n"
            "from autograder.sandbox import Limits, Sandbox\n"
            f"seen, worker = look(Path({str(folder)!r}))\n"
            f"with Sandbox(Path({str(folder)!r}), None, [], Limits()) as sandbox:\n"
            "    environment = sorted(sandbox.environment())\n"
            "print(json.dumps({'seen': seen, 'warm': type(worker.process).__name__, 'cold': zygote.why_cold(),"
            " 'environment': environment}))\n"
        )
        done = as_user(user, sys.executable, "-c", script, cwd=folder)
        said = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert said["warm"] == "WarmProcess", f"started cold as an ordinary account: {said['cold']}"
    _assert_confined(said["seen"], said["environment"])
    assert said["seen"]["status"] is not None


def _ids(user: str) -> tuple[int, int]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


# Student code that leaves a daemon (``sleep 9<token>``), then ends its worker once the grader is between
# requests (a thread ends the process after the cell's reply has gone).
ENDS_BETWEEN_REQUESTS = """
import os, threading, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "9{token}"])
    os._exit(0)
os.wait()
def running():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{{pid}}/cmdline", "rb").read() == b"sleep\\0009{token}\\0":
                return True
        except OSError:
            pass
deadline = time.monotonic() + 30
while not running() and time.monotonic() < deadline:  # the daemon has exec'd before the cell returns
    time.sleep(0.05)
threading.Thread(target=lambda: (time.sleep(0.5), os._exit(0)), daemon=True).start()
"""


def test_a_worker_that_ends_between_requests_ends_its_sandbox_and_daemons(tmp_path):
    """A cold worker is bubblewrap's command: its end ends the sandbox. A warm one's sandbox is held by the
    placeholder, so its end must end the sandbox too, at once, not when the grader next asks for a worker."""
    _require_sandbox()
    token = str(secrets.randbelow(10**9))
    with Sandbox(_folder(tmp_path, "submission"), None, [], Limits()) as sandbox:
        worker = Worker(sandbox).ready(ADAPTERS)
        try:
            assert isinstance(worker.process, zygote.WarmProcess), zygote.why_cold()
            source = ENDS_BETWEEN_REQUESTS.format(token=token)
            assert worker.request({"op": "exec", "index": 0, "source": source}, 60, "planting")["ok"]
            assert sleepers(token), "the daemon did not start"
            worker.process.wait(timeout=30)  # the worker ends by itself; nobody kills anything
            deadline = time.monotonic() + 10
            while (
                sleepers(token) or worker.process.placeholder.process.poll() is None
            ) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not sleepers(token), "a daemon outlived its worker"
            assert worker.process.placeholder.process.poll() is not None, "the sandbox outlived its worker"
        finally:
            worker.kill()
            for pid in sleepers(token):
                os.kill(pid, 9)


# Broken zygotes: workers that cannot join their sandbox (as where bubblewrap is installed setuid root), and a
# zygote that forgets to drop the capabilities its workers hold, which the worker's own check must catch.
BROKEN_ZYGOTES = {
    "cannot join": (
        "def broken(fds, unprivileged):\n"
        "    raise z.NotJoined(1, 'joining the sandbox: Operation not permitted')\n"
        "z._join = broken\n",
        "Operation not permitted",
    ),
    "keeps its capabilities": (
        "z._drop_capabilities = lambda keep_setuid: None\n",
        "still holds capabilities",
    ),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_ZYGOTES))
def test_where_a_worker_cannot_start_warm_it_starts_cold(tmp_path, monkeypatch, broken):
    _require_sandbox()
    patch, reason = BROKEN_ZYGOTES[broken]
    program = f"import sys, autograder.zygote as z\n{patch}z.main(sys.argv)\n"
    made = {}

    def shared(environment, imports=()):
        if "zygote" not in made:
            made["zygote"] = zygote.Zygote(environment, imports, command=[sys.executable, "-I", "-B", "-c", program])
        return made["zygote"]

    monkeypatch.setattr(zygote, "shared", shared)
    monkeypatch.setattr(zygote, "_gave_up", None)
    try:
        seen, worker = look(_folder(tmp_path, "submission"))
    finally:
        if "zygote" in made:
            made["zygote"].close()
    assert not isinstance(worker.process, zygote.WarmProcess)
    assert reason in zygote.why_cold()
    assert seen["uid"] != 0 and seen["ppid"] in (0, 1)


# A grader that starts its zygote, says where, and waits to be killed.
GRADER = """
import os, sys
from autograder import zygote
started = zygote.shared(dict(os.environ))
print(started.home, started.process.pid, flush=True)
sys.stdin.read()
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_grader_killed_with_its_process_group_leaves_no_zygote_behind():
    """A grader killed by a signal (Ctrl-C in a terminal, a kill of its process group) runs no clean-up of its
    own. Its zygote, in a session of its own, sees the socket's end, removes its folder and ends."""
    grader = subprocess.Popen(
        [sys.executable, "-c", GRADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    home, pid = grader.stdout.readline().split()
    assert Path(home).is_dir() and _running(int(pid))
    os.killpg(grader.pid, signal.SIGKILL)
    grader.wait()
    deadline = time.monotonic() + 60  # the zygote notices once it has imported what workers need
    while (Path(home).exists() or _running(int(pid))) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(home).exists(), "the zygote's folder outlived its grader"
    assert not _running(int(pid)), "the zygote outlived its grader"
