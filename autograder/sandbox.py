"""The OS sandbox around every process that runs student code: bubblewrap plus resource limits.

``Sandbox.wrap(argv)`` turns a command into one that runs under bubblewrap (``bwrap``):

- the whole filesystem read-only; ``/tmp``, ``/var/tmp``, ``/run``, ``/home`` and the grader's
  home replaced by empty read-only folders; the Python installation, the ``autograder`` and
  ``coursetools`` packages and the course folder put back read-only; the course's private
  folders (instructor sources, submissions, gradebook, feedback) hidden again;
- one writable place: a private scratch copy of the submission folder, mounted where the
  submission was, so relative paths in the notebook still work; it is deleted afterwards;
- its own PID, network (loopback only), IPC and UTS namespaces; when the sandbox's first
  process ends, the kernel ends every process inside it;
- an explicit, minimal environment.

``Limits`` (memory, processes, file size) are applied by the worker itself before any
student code runs (``Limits.apply``), so they hold with or without bubblewrap.

When the grader runs as root, bubblewrap cannot use a user namespace to drop privileges,
so the worker switches to an unprivileged user id of its own (``Sandbox.uid``) before
running student code: the kernel does not enforce a process limit on root, and a distinct
user id per sandbox keeps one submission's processes from counting against another's.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import autograder
import coursetools
from autograder.errors import GradingError
from coursetools.grading_run import GRADING_ENV

BWRAP_ENV = "AUTOGRADER_BWRAP"  # the bwrap executable; tests point it elsewhere to simulate its absence
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install bubblewrap) "
    "on a Linux kernel that allows user namespaces"
)
HIDDEN = ("/tmp", "/var/tmp", "/run", "/home")  # besides the grader's home
DEFAULT_TIMEOUT = 30.0  # seconds per cell and per call into student code


def hidden_anyway(path: Path) -> bool:
    """Whether the sandbox hides ``path`` with one of the folders it always empties (the grader's home, /tmp...)."""
    return any(Path(path).resolve().is_relative_to(Path(h).resolve()) for h in (*HIDDEN, Path.home()))


UNPRIVILEGED_UIDS = range(200_000, 1_000_000)  # for a sandbox started by root; no files belong to them


class SandboxUnavailable(RuntimeError):
    """Student code cannot be sandboxed here; the message says why and what to do."""


def parse_size(text: str | int) -> int:
    """Bytes from ``3G``, ``512M``, ``1.5G``, ``64K`` or a plain number of bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)I?B?\s*", str(text).upper())
    if not match:
        raise ValueError(f"not a size: {text!r} (write for example 3G or 512M)")
    number, unit = match.groups()
    return int(float(number) * 1024 ** " KMGT".index(unit or " "))


def format_size(size: int) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} bytes"


# The defaults, as written in nbgrader_config.py and on the command line.
DEFAULT_MEMORY, DEFAULT_PROCESSES, DEFAULT_FILE_SIZE = "3G", 256, "1G"
HUGGING_FACE_HOME = "/nonexistent/huggingface"  # every worker's HF_HOME (Sandbox.environment)


@dataclass(frozen=True)
class Limits:
    """Per-process resource limits for student code (``setrlimit``)."""

    memory: int = parse_size(DEFAULT_MEMORY)  # address space, bytes (RLIMIT_AS)
    processes: int = DEFAULT_PROCESSES  # processes and threads (RLIMIT_NPROC); torch starts one thread per core
    file_size: int = parse_size(DEFAULT_FILE_SIZE)  # largest file it may write, bytes (RLIMIT_FSIZE)

    @classmethod
    def from_settings(cls, memory: str | int, processes: int, file_size: str | int) -> Limits:
        return cls(parse_size(memory), int(processes), parse_size(file_size))

    def to_json(self) -> dict:
        return asdict(self)

    def apply(self, processes: bool = True) -> list[str]:
        """Set the limits on this process (and so on everything it starts); say which could not be set.

        ``processes`` is False outside a sandbox: there RLIMIT_NPROC would count every
        process of the user, not only the student's. The caller decides what a limit that could not
        be set means: an error when grading in the sandbox, a warning for an unsandboxed self-check.
        """
        wanted = {
            resource.RLIMIT_AS: ("memory", self.memory, format_size),
            resource.RLIMIT_FSIZE: ("file size", self.file_size, format_size),
            resource.RLIMIT_CORE: ("core file size", 0, format_size),
        }
        if processes:
            wanted[resource.RLIMIT_NPROC] = ("processes", self.processes, str)
        failed = []
        for which, (name, value, shown) in wanted.items():
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError) as error:  # e.g. above a hard limit set by whoever started the grader
                hard = resource.getrlimit(which)[1]
                failed.append(
                    f"the {name} limit ({shown(value)}) could not be set: {error} "
                    f"(the hard limit here is {'unlimited' if hard == resource.RLIM_INFINITY else shown(hard)})"
                )
        # Writing past the file-size limit then raises OSError(EFBIG) instead of killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        return failed

    def explain(self, error: BaseException) -> str | None:
        """The limit that ``error`` ran into, in words, or None."""
        text = str(error)
        if isinstance(error, MemoryError) or "can't allocate memory" in text or "Cannot allocate memory" in text:
            return f"your code used more than {format_size(self.memory)} of memory, the limit for grading"
        if isinstance(error, OSError) and error.errno == errno.EFBIG:
            return f"your code wrote a file larger than {format_size(self.file_size)}, the limit for grading"
        if (isinstance(error, OSError) and error.errno == errno.EAGAIN) or "can't start new thread" in text:
            return f"your code started more than {self.processes} processes or threads, the limit for grading"
        return None


@functools.cache
def unavailable_reason() -> str | None:
    """None when bubblewrap runs here; else why not, in a few words."""
    bwrap = os.environ.get(BWRAP_ENV, "bwrap")
    if sys.platform != "linux":
        return f"bubblewrap needs Linux (this is {sys.platform})"
    executable = shutil.which(bwrap)
    if executable is None:
        return f"bubblewrap ({bwrap}) is not installed"
    probe = [executable, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--die-with-parent"]
    probe += [] if os.geteuid() == 0 else ["--unshare-user"]
    try:
        done = subprocess.run([*probe, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap did not start ({error})"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"bubblewrap cannot create namespaces here ({said})"
    return None


def _under(path: Path, roots: list[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def _make_dirs(path: Path, emptied: list[Path]) -> list[str]:
    """Mount points for ``path`` inside the innermost emptied folder, readable by any user."""
    roots = [root for root in emptied if path.is_relative_to(root) and path != root]
    if not roots:
        return []
    root = max(roots, key=lambda r: len(r.parts))
    parts = path.relative_to(root).parts
    made = []
    for i in range(1, len(parts)):
        made += ["--perms", "0755", "--dir", str(root.joinpath(*parts[:i]))]
    return made


@dataclass
class Sandbox:
    """Where student code may look and write, for one submission folder.

    A context manager: entering makes the scratch copy of the submission, leaving deletes it, and
    a failure while making it (a file that cannot be copied, a chown refused) deletes what was made::

        with Sandbox(folder, course_root) as sandbox:
            subprocess.run(sandbox.wrap(argv), env=sandbox.environment(), cwd=sandbox.submission)
    """

    submission: Path  # the folder the notebook lives in; student code sees a writable copy of it
    course_root: Path | None = None  # shown read-only (data/, other public files)
    private: list[Path] = field(default_factory=list)  # hidden even inside course_root
    limits: Limits = field(default_factory=Limits)
    enabled: bool = True  # False: no bubblewrap (self-check where there is none); limits still apply
    scratch: Path | None = field(init=False, default=None)  # exists between __enter__ and __exit__
    uid: int | None = field(init=False)

    def __post_init__(self):
        self.submission = self.submission.resolve()
        self.uid = secrets.choice(UNPRIVILEGED_UIDS) if self.enabled and os.geteuid() == 0 else None
        if self.uid is not None:  # root: student code runs as another user, who must be able to read these
            closed = [str(p) for p in self._shown() if p.is_dir() and p.stat().st_mode & 0o005 != 0o005]
            if closed:
                raise SandboxUnavailable(
                    f"grading as root runs student code as an unprivileged user, who cannot read {', '.join(closed)}: "
                    "make it readable by others (chmod o+rx) or grade as a normal user"
                )

    def __enter__(self) -> Sandbox:
        # Sandboxed: a copy of the submission, mounted in its place. Otherwise only HOME and TMPDIR.
        self.scratch = Path(tempfile.mkdtemp(prefix="autograder-"))
        try:
            if self.enabled:
                shutil.copytree(self.submission, self.scratch, dirs_exist_ok=True, symlinks=True)
            if self.uid is not None:
                for folder, _, files in os.walk(self.scratch):
                    for name in [folder, *(os.path.join(folder, f) for f in files)]:
                        os.lchown(name, self.uid, self.uid)
                # bubblewrap, still root but without CAP_DAC_OVERRIDE, must enter it (--chdir) before the switch.
                os.chmod(self.scratch, 0o711)
        except BaseException as error:
            self.cleanup()
            if isinstance(error, OSError | shutil.Error):
                raise GradingError(
                    f"could not be graded: could not make the scratch copy of {self.submission}: {error}"
                ) from None
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.cleanup()

    def _shown(self) -> set[Path]:
        """What student code must see (read-only) even inside an emptied folder."""
        shown = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix)}
        shown |= {Path(m.__file__).resolve().parent for m in (autograder, coursetools)}
        if self.course_root is not None:
            shown.add(self.course_root.resolve())
        return shown

    def settings(self) -> dict:
        """What the worker applies to itself before running student code (``worker.confine``)."""
        return {"limits": self.limits.to_json(), "uid": self.uid, "sandboxed": self.enabled}

    def environment(self) -> dict[str, str]:
        """All the environment student code gets: nothing of the grader's."""
        if self.scratch is None:
            raise RuntimeError("Sandbox.environment outside `with Sandbox(...)`: there is no scratch folder yet")
        home = str(self.submission if self.enabled else self.scratch)
        # One thread per core unless the grader's own OMP_NUM_THREADS says otherwise (a grader running
        # several submissions at once gives each one thread).
        threads = os.environ.get("OMP_NUM_THREADS") or str(min(os.cpu_count() or 1, 8))
        return {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": home,
            "TMPDIR": home,
            "LANG": "C.UTF-8",
            "MPLBACKEND": "Agg",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "MALLOC_ARENA_MAX": "2",  # glibc reserves 64 MB of address space per arena otherwise
            GRADING_ENV: "1",  # notebooks cut their long demonstrations short (coursetools.grading_run)
            # Hugging Face's libraries fix their cache and token paths when imported, from HF_HOME or else HOME: one
            # path for every worker, so that a worker forked from a zygote that imported them (whose HOME is its own
            # folder) holds the paths a cold worker would. Grading has no network, so no worker fills a cache.
            "HF_HOME": HUGGING_FACE_HOME,
        }

    def wrap(self, argv: list[str], info_fd: int | None = None) -> list[str]:
        """``argv`` as a bubblewrap command line; mounts are applied in order, later ones on top.

        ``info_fd``: bubblewrap writes the PID of the sandbox's init there, as JSON.
        """
        if not self.enabled:
            return argv
        if self.scratch is None:
            raise RuntimeError("Sandbox.wrap outside `with Sandbox(...)`: there is no scratch copy yet")
        hidden = [Path(p) for p in (*HIDDEN, Path.home()) if Path(p).is_dir()]
        hidden = sorted({p for p in hidden if not any(p != h and p.is_relative_to(h) for h in hidden)})
        shown = self._shown()
        bwrap = shutil.which(os.environ.get(BWRAP_ENV, "bwrap")) or "bwrap"
        command = [
            bwrap,
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
        ]
        if self.uid is None:
            command.append("--unshare-user")
        else:  # root: bubblewrap would keep every capability; the worker needs two, to switch to self.uid
            command += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        if info_fd is not None:
            command += ["--info-fd", str(info_fd)]
        command += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        emptied = []  # tmpfs mounts, made read-only once every mount point inside them exists
        for path in hidden:
            command += ["--perms", "0755", "--tmpfs", str(path)]
            emptied.append(path)
        for path in sorted(shown, key=lambda p: len(p.parts)):
            if _under(path, emptied):
                command += _make_dirs(path, emptied) + ["--ro-bind", str(path), str(path)]
        for path in (p.resolve() for p in self.private):
            if path.is_file():
                command += ["--ro-bind", "/dev/null", str(path)]
            elif path.is_dir():
                command += ["--perms", "0755", "--tmpfs", str(path)]
                emptied.append(path)
        command += _make_dirs(self.submission, emptied) + ["--bind", str(self.scratch), str(self.submission)]
        for path in [*emptied, Path("/dev")]:  # /dev: bubblewrap's is a writable tmpfs (/dev/shm included)
            command += ["--remount-ro", str(path)]
        return command + ["--chdir", str(self.submission), "--", *argv]

    def cleanup(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def unsandboxed_note(reason: str) -> str:
    return (
        f"note: checking without a sandbox: {reason}. Your code runs with your own permissions; "
        "the memory and file-size limits still apply."
    )
