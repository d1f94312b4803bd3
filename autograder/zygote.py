"""A warm start for sandboxed workers: one process imports torch once, and each worker is a fork of it.

Starting a worker cost about a second of ``import torch``; a class of a hundred submissions paid it a
hundred times. Here one process per grader (the *zygote*, as Android and Chromium call theirs) imports
what every worker needs (torch, IPython, matplotlib's pyplot), freezes it out of the garbage collector's
sight, and then only forks. Notebooks whose workers import more (Hugging Face's models:
``autograder.notebooks.WORKER_IMPORTS``) get a zygote of their own that imports that too, so a worker never holds
another notebook's imports. The isolation stays bubblewrap's:

1. the grader starts a **placeholder** under ``Sandbox.wrap`` exactly as it would start a worker, so
   bubblewrap builds the namespaces and the mounts (the submission's scratch copy included); the
   placeholder is a shell that says it is ready and then sleeps;
2. the grader opens the placeholder's namespaces (``/proc/PID/ns/*``, and the user namespace that owns
   them) and hands them to the zygote, with the worker's pipes, over a Unix socket;
3. the zygote forks; that child (outside the sandbox, running no student code, invisible from inside it)
   enters the placeholder's PID namespace, forks the worker, and, when the worker ends, ends the sandbox (its
   init, through a pidfd: daemons included, as when a cold worker ends) and reports the worker's exit status;
4. the worker joins the placeholder's mount, IPC, UTS, network and cgroup namespaces and then the user
   namespace the placeholder runs in, gives up every capability it holds there (ambient, bounding,
   permitted and effective: what bubblewrap drops for its own child), sets ``no_new_privs`` and a session
   of its own as bubblewrap does, keeps no file descriptor but its pipes, takes the sandbox's environment,
   and runs ``worker.confine`` (the sandbox's user id when graded as root, the limits) as a cold worker does;
5. before any student code, the worker checks that it holds no capability, that ``no_new_privs`` is set,
   that each namespace is the placeholder's, and that it can read every module the zygote imported; if
   not, it ends before serving.

Killing the placeholder's PID-namespace init (bubblewrap's) kills the worker and all it started, as before.
Wherever a warm worker cannot start (a namespace that cannot be joined, as with a bubblewrap installed setuid
root; a sandbox that hides the course's package; bubblewrap failing to build the placeholder's sandbox), the
grader starts that worker cold, a fresh Python under its own bubblewrap (``process.Worker``), and every later
one of that grader process too: slower, equally isolated, and failing, if it does, with a cold start's message.

The zygote holds nothing a student may not see: it starts with the sandbox's environment (its
``/proc/self/environ`` is what each worker inherits), from an empty folder of its own.

What student code can tell apart from a cold worker, none of it a way out: ``os.getppid()`` is 0 (the worker's
parent is outside its PID namespace); ``/proc/self/cmdline`` and ``/proc/self/environ`` are the zygote's (the
latter naming the zygote's empty home); pyplot is already imported, with matplotlib's defaults (a
``matplotlibrc`` beside the notebook is not read); the workers of one zygote share Python's hash seed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import gc
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

# The order a worker joins them in. The user namespace first: as an unprivileged grader, only inside it does the
# worker hold CAP_SYS_ADMIN for the others. bubblewrap (unprivileged) sets up the mounts in one user namespace
# and runs its command in a second one nested in it; "user" is the first, "command_user" the second.
NAMESPACES = ("user", "mnt", "ipc", "uts", "net", "cgroup")
FLAGS = {
    "user": 0x10000000,
    "mnt": 0x00020000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "net": 0x40000000,
    "cgroup": 0x02000000,
    "pid": 0x20000000,
}
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
CAPABILITY_VERSION_3 = 0x20080522
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
READY_TIMEOUT = 30.0  # seconds for bubblewrap to set up the placeholder's sandbox
PLACEHOLDER = ["/bin/sh", "-c", "echo ready && exec sleep 2147483647"]
MAX_FDS = 16
COULD_NOT_JOIN = 70  # a forked worker's exit status when it could not enter the sandbox or drop a privilege
COLD_ENV = "AUTOGRADER_COLD_WORKERS"  # "1": every worker a fresh process (benchmarks compare the two)
_gave_up: str | None = None  # why this grader process starts its workers cold


def usable() -> bool:
    """Whether workers are forked from a zygote here (else each is a fresh Python in its own bubblewrap)."""
    return _gave_up is None and os.environ.get(COLD_ENV) != "1"


def why_cold() -> str:
    """Why workers start cold in this process ("" when they do not)."""
    if usable():
        return ""
    return _gave_up or f"{COLD_ENV}=1 is set"


def give_up(reason: str) -> None:
    """A forked worker could not enter its sandbox here: workers start cold from now on, in this process."""
    global _gave_up
    _gave_up = reason


class NotJoined(OSError):
    """A namespace could not be joined or a privilege not dropped: the worker must not run."""


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _checked(result: int, doing: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise NotJoined(number, f"{doing}: {os.strerror(number)}")


# ----------------------------------------------------------------------------------------------------------------
# The grader's side


@dataclass
class Placeholder:
    """The sandbox, built by bubblewrap around a process that only sleeps: the worker joins its namespaces."""

    process: subprocess.Popen  # bubblewrap
    init: int  # the PID-namespace init (bubblewrap's), as the grader sees it: killing it ends the sandbox
    sleeper: int  # the placeholder itself: its namespaces are the ones to join

    def namespace_fds(self) -> dict[str, int]:
        """Open the namespaces to join; the caller closes them.

        "user" is the user namespace that owns the others (unprivileged, bubblewrap's outer one, which no process
        is left in), "command_user" the one the placeholder runs in (bubblewrap's inner one, or the grader's).
        """
        opened = {}
        try:
            for name in ("mnt", "ipc", "uts", "net", "cgroup", "pid"):
                opened[name] = os.open(f"/proc/{self.sleeper}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
            opened["command_user"] = os.open(f"/proc/{self.sleeper}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
            opened["user"] = fcntl.ioctl(opened["pid"], NS_GET_USERNS)
            os.set_inheritable(opened["user"], False)
            # bubblewrap's init, by a descriptor that cannot name another process once it has ended: the worker's
            # end ends the sandbox through it, as a cold worker's end ends its bubblewrap.
            opened["init"] = os.pidfd_open(self.init)
        except OSError:
            for fd in opened.values():
                os.close(fd)
            raise
        return opened


def start_placeholder(wrap, environment: dict, cwd: Path) -> Placeholder:
    """Start bubblewrap around the placeholder (``wrap`` is ``Sandbox.wrap``); return once its sandbox is built."""
    info_read, info_write = os.pipe()
    try:
        process = subprocess.Popen(
            wrap(PLACEHOLDER, info_fd=info_write),
            pass_fds=(info_write,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=environment,
            start_new_session=True,
        )
    finally:
        os.close(info_write)
    try:
        ready = _read_line(process.stdout, READY_TIMEOUT)  # the sandbox is built once its command runs
        said = os.read(info_read, 4096) if select.select([info_read], [], [], 5)[0] else b"{}"
        if ready != b"ready\n":
            raise OSError(f"bubblewrap did not set up the sandbox: {_said(process)}")
        init = json.loads(said)["child-pid"]
        children = Path(f"/proc/{init}/task/{init}/children").read_text().split()
        if len(children) != 1:
            raise OSError(f"the sandbox's init has {len(children)} children, not the placeholder alone")
        return Placeholder(process, init, int(children[0]))
    except BaseException:
        _end(process)
        raise
    finally:
        os.close(info_read)


def _read_line(stream, timeout: float) -> bytes:
    found: list[bytes] = []
    reader = threading.Thread(target=lambda: found.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return found[0] if found else b""


def _said(process: subprocess.Popen) -> str:
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
    text = process.stderr.read().decode("utf-8", "replace").strip() if process.poll() is not None else ""
    return text.splitlines()[-1] if text else f"no message (exit status {process.returncode})"


def _end(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


class Zygote:
    """The grader's handle on its zygote process; ``shared()`` gives one per grader process, environment and set
    of ``imports`` (beyond what every worker imports: ``worker.preload``)."""

    def __init__(self, environment: dict[str, str], imports: tuple[str, ...] = (), command: list[str] | None = None):
        self.home = tempfile.mkdtemp(prefix="autograder-zygote-")
        self.environment = dict(environment, HOME=self.home, TMPDIR=self.home)
        self._socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.lock = threading.Lock()
        try:
            # -I and -B as for a cold worker; its folder is its own empty one, never a student's.
            # A session of its own: a signal to the grader's process group (Ctrl-C, a kill of the group) ends
            # the grader, whose socket's end then ends the zygote, which removes its folder on the way out.
            self.process = subprocess.Popen(
                [
                    *(command or [sys.executable, "-I", "-B", "-m", "autograder.zygote"]),
                    str(theirs.fileno()),
                    self.home,
                    json.dumps(list(imports)),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                cwd=self.home,
                env=self.environment,
                start_new_session=True,
            )
        finally:
            theirs.close()

    def alive(self) -> bool:
        return self.process.poll() is None

    def spawn(self, fds: dict[str, int], settings: dict, cwd: Path, environment: dict[str, str]) -> None:
        """Ask for a worker: it joins the namespaces in ``fds`` and serves ``fds['request']``/``fds['reply']``.

        Returns at once: the worker says it is ready (or why not) on its own pipes, as a cold one does.
        """
        names = sorted(fds)
        message = json.dumps({"fds": names, "settings": settings, "cwd": str(cwd), "environment": environment})
        with self.lock:
            socket.send_fds(self._socket, [message.encode()], [fds[name] for name in names])

    def close(self) -> None:
        self._socket.close()  # the zygote ends when its socket does
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.home, ignore_errors=True)


_ZYGOTES: dict[tuple, Zygote] = {}
_ZYGOTES_LOCK = threading.Lock()


def shared(environment: dict[str, str], imports: tuple[str, ...] = ()) -> Zygote:
    """This grader's zygote for workers with ``environment`` (HOME and TMPDIR aside) that import ``imports``,
    started on first use: a worker holds its own notebook's imports, never another notebook's."""
    key = (tuple(sorted((k, v) for k, v in environment.items() if k not in ("HOME", "TMPDIR"))), tuple(imports))
    with _ZYGOTES_LOCK:
        zygote = _ZYGOTES.get(key)
        if zygote is None or not zygote.alive():
            zygote = _ZYGOTES[key] = Zygote(environment, tuple(imports))
            if len(_ZYGOTES) == 1:
                atexit.register(close_all)
        return zygote


def close_all() -> None:
    with _ZYGOTES_LOCK:
        for zygote in _ZYGOTES.values():
            zygote.close()
        _ZYGOTES.clear()


class WarmProcess:
    """A worker forked by the zygote into ``sandbox``, seen as ``subprocess.Popen`` sees a process.

    ``pid`` is bubblewrap's (its own process group), ``stdout`` what the worker prints, ``poll``/``wait``/
    ``returncode`` the worker's exit status, reported by the zygote's child that waits for it.
    """

    def __init__(self, sandbox, settings: dict, request_read: int, reply_write: int):
        environment = sandbox.environment()
        self.placeholder = start_placeholder(sandbox.wrap, environment, sandbox.submission)
        self.pid, self.init = self.placeholder.process.pid, self.placeholder.init
        self.returncode: int | None = None
        output_read, output_write = os.pipe()
        self._status, status_write = os.pipe()
        try:
            fds = self.placeholder.namespace_fds()
            try:
                fds |= {"request": request_read, "reply": reply_write, "output": output_write, "status": status_write}
                shared(environment, tuple(settings["imports"])).spawn(fds, settings, sandbox.submission, environment)
            finally:
                for name in (*NAMESPACES, "command_user", "pid", "init"):
                    os.close(fds[name])
        except BaseException:
            os.close(output_read)
            os.close(self._status)
            _end(self.placeholder.process)
            raise
        finally:
            os.close(output_write)
            os.close(status_write)
        self.stdout = open(output_read, "rb")  # noqa: SIM115 - read by process._Tail until the worker ends

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("worker", timeout)
            self._read_status()
        return self.returncode

    def _read_status(self) -> None:
        said = os.read(self._status, 64)
        self.returncode = int(said) if said.strip().lstrip(b"-").isdigit() else -1  # no word: the zygote died

    def kill(self) -> None:
        """End the sandbox (its init, so every process in it) and bubblewrap; wait for the worker's status."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.init, signal.SIGKILL)
        _end(self.placeholder.process)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(timeout=10)
        if self._status != -1:
            os.close(self._status)
            self._status = -1


# ----------------------------------------------------------------------------------------------------------------
# The zygote's side


def serve(channel: socket.socket, imports: tuple[str, ...] = ()) -> None:
    """Import what workers need (with ``imports``, their notebooks'), then fork one per request until the grader
    closes the socket."""
    from autograder import worker

    worker.preload(imports)
    # Every notebook draws: pyplot once here, with the sandbox's MPLBACKEND=Agg and matplotlib's defaults (the
    # zygote's home and folder are its own empty one, so a matplotlibrc beside a notebook is not read), and its
    # font list built once rather than in each submission's scratch home.
    import matplotlib.pyplot  # noqa: F401

    # What was imported lives as long as the zygote: frozen out of the garbage collector's sight, each worker's
    # collections skip it and leave its pages shared with the zygote (about 0.5 s of a notebook 02 submission).
    gc.collect()
    gc.freeze()
    # Children are reaped by the kernel; each one that runs a worker resets this, to wait for it.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(channel, 1 << 20, MAX_FDS)
        except OSError:
            return
        if not message:
            return
        request = json.loads(message)
        named = dict(zip(request["fds"], fds, strict=True))
        sys.stdout.flush()
        sys.stderr.flush()
        with warnings.catch_warnings():
            # Python 3.12+ warns about forking a process with threads: numpy's OpenBLAS server thread, which
            # OpenBLAS itself stops and restarts around fork (pthread_atfork). The child runs one thread.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            channel.close()
            _run_child(named, request)  # never returns
        for fd in fds:
            os.close(fd)


def _run_child(fds: dict[str, int], request: dict) -> None:
    """In the zygote's child: enter the PID namespace, fork the worker, report its exit status, end.

    As an unprivileged grader it enters bubblewrap's outer user namespace first: joining a PID namespace takes
    CAP_SYS_ADMIN in the namespace that owns it. It runs no student code, and the worker cannot see it (it is
    outside the worker's PID namespace).
    """
    status = COULD_NOT_JOIN
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        libc = _libc()
        unprivileged = os.geteuid() != 0
        if unprivileged:
            _checked(libc.setns(fds["user"], FLAGS["user"]), "joining the sandbox's user namespace")
        _checked(libc.setns(fds["pid"], FLAGS["pid"]), "joining the sandbox's PID namespace")
        worker_pid = os.fork()
        if worker_pid == 0:
            _become_worker(fds, request, unprivileged)  # never returns
        for name, fd in fds.items():
            if name not in ("status", "init"):
                os.close(fd)
        _, wait_status = os.waitpid(worker_pid, 0)
        status = os.waitstatus_to_exitcode(wait_status)
        # The placeholder would keep the sandbox, and whatever the worker left running in it, alive: end them now,
        # as the kernel does when a cold worker, bubblewrap's own command, ends.
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fds["init"], signal.SIGKILL)
    except BaseException as error:  # noqa: BLE001 - said on the worker's output, which the grader shows
        with contextlib.suppress(OSError):
            os.write(fds["output"], f"the grader's zygote could not start a worker: {error}\n".encode())
    finally:
        with contextlib.suppress(OSError):
            os.write(fds["status"], str(status).encode())
        os._exit(0)


def _become_worker(fds: dict[str, int], request: dict, unprivileged: bool) -> None:
    """In the worker: join the sandbox, give up every privilege, check that it did, then serve."""
    from autograder import worker

    try:
        os.dup2(fds["output"], 1)  # first: what goes wrong from here on is said where the grader reads it
        os.dup2(fds["output"], 2)
        _join(fds, unprivileged)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        _keep_only({0, 1, 2, fds["request"], fds["reply"]})
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["environment"])
        # Recomputed from this worker's TMPDIR at its first use: an import in the zygote may have fixed it to the
        # zygote's own folder, which the sandbox does not show.
        tempfile.tempdir = None
        os.setsid()  # as bubblewrap's --new-session: no controlling terminal to inject keystrokes into
        # What a cold worker's command line holds (python -m autograder.worker REQUEST REPLY SETTINGS), not the zygote's.
        sys.argv = [worker.__file__, str(fds["request"]), str(fds["reply"]), json.dumps(request["settings"])]
        _drop_capabilities(keep_setuid=request["settings"].get("uid") is not None)
        limits, unset = worker.confine(request["settings"])
        _check_unprivileged(request["settings"].get("uid"))
        _check_shown()
    except BaseException as error:  # noqa: BLE001
        os.write(2, f"the grader's zygote could not start a worker: {error}\n".encode())
        os._exit(COULD_NOT_JOIN)
    try:
        worker.serve(fds["request"], fds["reply"], limits, unset, request["settings"])
    except BaseException:  # noqa: BLE001 - as a cold worker would: the traceback, then exit status 1
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def _join(fds: dict[str, int], unprivileged: bool) -> None:
    """Join the placeholder's namespaces, its command's user namespace last; check each is the placeholder's.

    Unprivileged, the zygote's child has already entered bubblewrap's outer user namespace (where the mounts were
    made, and where this process may join the rest); as root, bubblewrap makes no user namespace.
    """
    libc = _libc()
    for name in NAMESPACES[1:]:
        _checked(libc.setns(fds[name], FLAGS[name]), f"joining the sandbox's {name} namespace")
    if unprivileged and not _same_namespace(fds["command_user"], "user"):
        _checked(libc.setns(fds["command_user"], FLAGS["user"]), "joining the sandbox's inner user namespace")
    for name in (*NAMESPACES, "pid"):  # as root too: there the user namespace is the grader's, as bubblewrap left it
        if not _same_namespace(fds["command_user" if name == "user" else name], name):
            raise NotJoined(0, f"the worker is not in the sandbox's {name} namespace")


def _same_namespace(fd: int, name: str) -> bool:
    mine, theirs = os.stat(f"/proc/self/ns/{name}"), os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def _keep_only(keep: set[int]) -> None:
    """Close every file descriptor but ``keep`` (the zygote's socket, pipes and namespaces included)."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities(keep_setuid: bool) -> None:
    """Drop the capabilities the namespaces gave: ambient and bounding sets, then all but the uid switch (root)."""
    libc = _libc()
    _checked(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient capabilities")
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for capability in range(last + 1):
        _checked(libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), f"dropping capability {capability}")
    _checked(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "setting no_new_privs")
    kept = (1 << 6) | (1 << 7) if keep_setuid else 0  # CAP_SETGID, CAP_SETUID: worker.confine switches user
    data = (_CapData * 2)((kept, kept, 0), (0, 0, 0))
    _checked(libc.capset(ctypes.byref(_CapHeader(CAPABILITY_VERSION_3, 0)), data), "dropping capabilities")


def _check_shown() -> None:
    """Every module the zygote imported must be readable here, as the worker's user, as it would be for a cold
    worker importing it: a sandbox that hides the course's package or torch is left to a cold start to report."""
    hidden = sorted(
        {
            name.partition(".")[0]
            for name, module in list(sys.modules.items())
            if _is_path(getattr(module, "__file__", None)) and not os.access(module.__file__, os.R_OK)
        }
    )
    if hidden:
        raise NotJoined(0, f"the sandbox does not show what the zygote imported: {', '.join(hidden)}")


def _is_path(file) -> bool:
    return isinstance(file, str) and os.path.isabs(file)  # torch.ops says "_ops.py": no file of its own


def _check_unprivileged(uid: int | None) -> None:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    held = {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb") if int(status[k], 16)}
    if held:
        raise NotJoined(0, f"the worker still holds capabilities: {held}")
    if status["NoNewPrivs"].strip() != "1":
        raise NotJoined(0, "no_new_privs is not set")
    if uid is not None and os.getuid() != uid:
        raise NotJoined(0, f"the worker runs as uid {os.getuid()}, not the sandbox's {uid}")


def main(argv: list[str]) -> None:
    """The zygote's process: ``python -m autograder.zygote SOCKET_FD HOME IMPORTS_JSON``; it removes HOME when it ends.

    The grader removes HOME too (``Zygote.close``), but a grader killed by a signal runs no clean-up: its socket's
    end still ends the zygote here.
    """
    try:
        serve(socket.socket(fileno=int(argv[1])), tuple(json.loads(argv[3])))
    finally:
        shutil.rmtree(argv[2], ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv)
