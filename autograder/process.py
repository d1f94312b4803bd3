"""The checker's side of the process boundary: start, feed, time and restart a worker.

``StudentProcess`` runs a notebook's code cells in a ``worker`` process, inside the
OS sandbox (``autograder.sandbox``), and then answers adapter calls. If student code
hangs or ends the process, that cell (or call) is reported, the worker and everything
it started are killed, a new worker starts in the same scratch folder, and the cells
that ran cleanly are replayed, so one bad cell costs only what depends on it.
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autograder import outputs, wire, zygote
from autograder.errors import (
    GradingError,
    SandboxError,
    StudentCodeError,
    WorkerDidNotStart,
    cell_number,
    could_not_grade,
)
from autograder.phases import Phase, starting_detail
from autograder.sandbox import Sandbox

START_TIMEOUT = 120.0  # seconds to import torch and get ready, on a slow, busy machine
# The worker stops student code itself once a cell's or call's time is up (autograder.time_limit), and answers;
# only code that does not let it (stuck in one C call, or catching the error) meets the checker's own timeout,
# this much later, which ends the process.
HARD_TIMEOUT_GRACE = 5.0
OUTPUT_TAIL = 4000  # characters of the student's printed output kept for messages


@dataclass
class CellOutcome:
    index: int
    ok: bool
    error: str | None = None
    outputs: list = field(default_factory=list)  # nbformat outputs, when recorded
    stopped: bool = False  # it hung or ended its process (never replayed); else, if not ok, it raised


class _Tail(threading.Thread):
    """Drains the worker's stdout/stderr so a chatty student cannot block it; keeps the end."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.text = stream, ""

    def run(self):
        for chunk in iter(lambda: self.stream.read1(65536), b""):
            self.text = (self.text + chunk.decode("utf-8", "replace"))[-OUTPUT_TAIL:]


class Worker:
    """One worker process and the two pipes to it.

    ``Worker(sandbox, imports)`` starts the process and returns at once: it imports torch, IPython and
    ``imports`` (``autograder.notebooks.WORKER_IMPORTS``) while the checker imports its checks;
    ``ready(adapter_module)`` then names the notebook's adapters and waits until the worker has imported them.
    """

    def __init__(self, sandbox: Sandbox, imports: tuple[str, ...] = ()):
        request_read, self._request_write = os.pipe()
        self._reply_read, reply_write = os.pipe()
        self._info_read, info_write = os.pipe()  # bubblewrap says there which process is the sandbox's init
        # -I (isolated): neither the working directory, which is the student's folder, nor PYTHON* variables
        # shape what the worker imports before it has given up root and set its limits (a json.py beside
        # the notebook must never run as grader code); -B: the environment's PYTHONDONTWRITEBYTECODE, which
        # -I ignores. The worker puts the folder on sys.path itself, once it runs student code.
        settings = sandbox.settings() | {"imports": list(imports)}
        argv = [
            sys.executable,
            "-I",
            "-B",
            "-m",
            "autograder.worker",
            str(request_read),
            str(reply_write),
            json.dumps(settings),
        ]
        try:
            self.process = self._start(sandbox, settings, argv, request_read, reply_write, info_write)
        except OSError as error:  # bubblewrap or Python cannot be executed: nothing of the student's ran
            for fd in (request_read, self._request_write, self._reply_read, reply_write, self._info_read, info_write):
                os.close(fd)
            raise GradingError(f"could not be graded: the grader's worker could not be started ({error})") from None
        for fd in (request_read, reply_write, info_write):
            os.close(fd)
        self.tail = _Tail(self.process.stdout)
        self.tail.start()
        self._sandbox_init = getattr(self.process, "init", None)
        self.warnings: list[str] = []
        self._sandbox, self._imports = sandbox, imports

    @staticmethod
    def _start(sandbox: Sandbox, settings: dict, argv: list[str], request_read: int, reply_write: int, info_write: int):
        """A worker forked from the zygote, or, without a sandbox or where that cannot be, a fresh Python."""
        if sandbox.enabled and zygote.usable():
            try:
                return zygote.WarmProcess(sandbox, settings, request_read, reply_write)
            except OSError as error:  # bubblewrap could not build the sandbox: a cold start says why, as always
                zygote.give_up(str(error))
        return subprocess.Popen(
            sandbox.wrap(argv, info_fd=info_write),
            pass_fds=(request_read, reply_write, info_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=sandbox.submission,
            env=sandbox.environment(),
            start_new_session=True,
        )

    def ready(self, adapter_module: str) -> Worker:
        """Name the adapters; return once the worker has imported them and is ready for cells.

        Raises ``WorkerDidNotStart`` if it ends or hangs first (it could not import the course's package or
        torch, bubblewrap could not set up the sandbox...), with the last line it wrote as the reason.
        """
        try:
            try:
                wire.send(self._request_write, pickle.dumps({"adapters": adapter_module}))
            except OSError:  # it has ended already (a limit it could not set): its reply says why
                pass
            try:
                ready = self._await(None, START_TIMEOUT, "starting Python")
            except SandboxError as error:
                self.kill()
                self.tail.join(timeout=2)  # the last of what it wrote
                said = [line.strip() for line in self.tail.text.splitlines() if line.strip()]
                status = self.process.returncode
                reason = said[-1] if said else str(error)
                if isinstance(self.process, zygote.WarmProcess):
                    # Nothing of the student's ran. A cold start, from now on in this grader process, either works
                    # or fails as it always has, with its own message (a hidden package, a broken bubblewrap...).
                    zygote.give_up(reason)
                    return Worker(self._sandbox, self._imports).ready(adapter_module)
                raise WorkerDidNotStart(f"{reason} (exit status {status})" if said else reason) from None
            if not ready["ok"]:  # a limit could not be set: nothing of the student's may run
                self.kill()
                raise GradingError(f"could not be graded here: {ready['error']}")
            self.warnings = ready["value"]["warnings"]
            if self._sandbox.enabled and self._sandbox_init is None and select.select([self._info_read], [], [], 5)[0]:
                self._sandbox_init = json.loads(os.read(self._info_read, 4096))["child-pid"]
        finally:
            self._close_info()
        return self

    def _close_info(self) -> None:
        if self._info_read != -1:
            os.close(self._info_read)
            self._info_read = -1

    def request(self, message: dict, timeout: float, doing: str):
        """Send ``message`` and wait for the reply: the worker stops the student's code after ``timeout``
        seconds itself; this process ends the worker only if no reply comes a little after that."""
        message = dict(message, nonce=secrets.token_hex(8), timeout=timeout)
        try:
            wire.send(self._request_write, pickle.dumps(message))
        except OSError:
            raise self._died(doing) from None
        return self._await(message["nonce"], timeout + HARD_TIMEOUT_GRACE, doing, limit=timeout)

    def _await(self, nonce, timeout: float, doing: str, limit: float | None = None):
        try:
            reply = wire.load_reply(wire.receive(self._reply_read, time.monotonic() + timeout))
        except TimeoutError:
            self.kill()
            raise SandboxError(
                f"no answer after {limit or timeout:g} s while {doing}: an infinite loop, or far too slow"
            ) from None
        except wire.WireError as error:
            raise self._died(doing, str(error)) from None
        if not isinstance(reply, dict) or reply.get("nonce") != nonce:
            self.kill()
            raise SandboxError(f"the worker sent a reply that does not belong to {doing}")
        return reply

    def _died(self, doing: str, detail: str = "") -> SandboxError:
        try:  # a closed pipe usually means the process is exiting: give it a moment
            self.process.wait(timeout=2)
            alive = False
        except subprocess.TimeoutExpired:
            alive = True
        self.kill()
        if alive:  # it did not end: something in it wrote into the grader's pipe
            return SandboxError(f"your code interfered with the grader's channel while {doing}: {detail}")
        said = self.tail.text.strip().splitlines()[-3:]
        return SandboxError(
            f"the Python process running your code ended (exit status {self.process.returncode}) "
            f"while {doing}: os._exit, sys.exit, a crash or too much memory?"
            + (f" Last output: {' | '.join(said)}" if said else "")
        )

    def kill(self):
        """End the worker and everything it started; return once they are gone.

        Killing the sandbox's init makes the kernel kill every process in its PID
        namespace (daemons included); bubblewrap exits after them.
        """
        if isinstance(self.process, zygote.WarmProcess):
            self.process.kill()  # its sandbox outlives the worker: always ended
        for kill, pid in ((os.kill, self._sandbox_init), (os.killpg, self.process.pid)):
            if pid is not None and self.process.poll() is None:
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.process.wait()
        self._close_info()
        for fd in (self._request_write, self._reply_read):
            try:
                os.close(fd)
            except OSError:
                pass
        self._request_write = self._reply_read = -1


@dataclass
class StudentProcess:
    """Runs ``cells`` (index, source) in a worker, then serves adapter calls."""

    adapter_module: str
    cells: list[tuple[int, str]]
    sandbox: Sandbox
    timeout: float = 30.0
    record: bool = False  # keep each cell's outputs (for nbgrader's feedback)
    outcomes: dict[int, CellOutcome] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # limits an unsandboxed worker could not set
    starting: Worker | None = None  # started before the adapters were known (grading.grade); readied at first use
    on_phase: Callable[[Phase], None] | None = None  # told each cell, start and replay as it begins (display only)
    imports: tuple[str, ...] = ()  # what each worker imports before the cells (autograder.notebooks.WORKER_IMPORTS)
    _worker: Worker | None = None
    _started: bool = False  # a worker has been started (the next one is a restart)

    def _phase(self, *args) -> None:
        if self.on_phase is not None:
            self.on_phase(Phase(*args))

    def run_cells(self) -> dict[int, CellOutcome]:
        for step, (index, source) in enumerate(self.cells, 1):
            if index in self.outcomes:
                continue
            try:
                worker = self._ready_worker()
                self._phase("cells", step, len(self.cells), f"cell {cell_number(index)}")
                reply = worker.request(
                    {"op": "exec", "index": index, "source": source, "record": self.record},
                    self.timeout,
                    f"running cell {cell_number(index)}",
                )
                # A cell that ran out of time is not replayed (it would take as long again), like one that hung
                # the process.
                self.outcomes[index] = CellOutcome(
                    index, reply["ok"], reply.get("error"), reply["outputs"], stopped=bool(reply.get("ran_out"))
                )
            except SandboxError as error:
                self.outcomes[index] = CellOutcome(
                    index, False, str(error), [outputs.error("SandboxError", str(error))], stopped=True
                )
                self._worker = None
        return self.outcomes

    def call(self, name: str, args: tuple, kwargs: dict, rules: list[dict] = ()):
        """Run adapter ``name`` on the student's namespace, under ``rules``; raise StudentCodeError or SandboxError."""
        worker = self._ready_worker()
        try:
            reply = worker.request(
                {"op": "call", "name": name, "args": args, "kwargs": kwargs, "rules": list(rules)},
                self.timeout,
                "checking your code",
            )
        except SandboxError:
            self._worker = None
            raise
        if not reply["ok"]:
            raise StudentCodeError(
                reply["error"],
                stub=bool(reply.get("stub")),
                rule=bool(reply.get("rule")),
                ran_out=bool(reply.get("ran_out")),
            )
        return reply["value"]

    def _ready_worker(self) -> Worker:
        """The live worker, or a new one that has replayed every cell as it first ran.

        Replaying runs each cell that ran a second time, in the same scratch folder, so that the new
        process holds what the old one did: the cells that worked, and the cells that raised after
        some of their statements had run (a ``def`` before the error stays defined), which are
        expected to raise again. Only the cells that hung or ended the process are left out. A cell
        that behaves differently the second time (a working cell raises, any cell hangs or ends the
        process) is marked failed, which costs the exercises that depend on it, and the replay starts
        again without it. Each round marks one more cell stopped, so this ends, and a submission always
        gets its report.

        A worker that fails to start before any cell has run is the grading set-up's failure
        (``errors.could_not_grade``): no student code has touched its scratch folder yet.
        """
        while self._worker is None or self._worker.process.poll() is not None:
            if self._worker is not None:  # it ended between requests: end its sandbox too, and reap it
                self._worker.kill()
            starting, self.starting = self.starting, None
            self._worker = None  # until the new one is ready: a failed start leaves no worker behind
            if self._started:
                self._phase("restarting")
            elif starting is None:  # else whoever started it has said so (grading.grade)
                self._phase("starting", 0, 0, starting_detail(self.sandbox.enabled))
            self._started = True
            try:
                self._worker = (starting or Worker(self.sandbox, self.imports)).ready(self.adapter_module)
            except WorkerDidNotStart as error:
                if not self.outcomes:
                    raise could_not_grade(error.reason) from None
                raise
            self.warnings += [w for w in self._worker.warnings if w not in self.warnings]
            replayed = [
                (index, source)
                for index, source in self.cells
                if index in self.outcomes and not self.outcomes[index].stopped
            ]
            for step, (index, source) in enumerate(replayed, 1):
                outcome = self.outcomes[index]
                self._phase("replaying", step, len(replayed), f"cell {cell_number(index)}")
                try:
                    reply = self._worker.request(
                        {"op": "exec", "index": index, "source": source},
                        self.timeout,
                        f"replaying cell {cell_number(index)}",
                    )
                except SandboxError as error:
                    self._replay_failed(outcome, str(error))
                    outcome.stopped = True
                    self._worker.kill()
                    self._worker = None
                    break
                if outcome.ok and not reply["ok"]:
                    self._replay_failed(outcome, reply["error"])
        return self._worker

    @staticmethod
    def _replay_failed(outcome: CellOutcome, error: str) -> None:
        outcome.ok = False
        outcome.error = (
            f"it ran, but when the grader ran it again (another cell had ended or hung the process, "
            f"so every cell that had worked was replayed) it failed: {error}. A cell must do the same "
            "each time it runs"
        )
        outcome.outputs = [*outcome.outputs, outputs.error("SandboxError", outcome.error)]

    def close(self):
        """End the worker; the sandbox's scratch folder belongs to whoever entered the sandbox."""
        if self.starting is not None:
            self.starting.kill()
            self.starting = None
        if self._worker is not None:
            self._worker.kill()
            self._worker = None
