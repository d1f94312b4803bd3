"""Several ranks of a data-parallel program on one CPU: forked processes joined by a gloo process group.

Notebook 14 runs the data parallelism you write on two or three processes, and its checks run it the same way:
``run_ranks(work, world_size)`` forks one process per rank, joins them with ``torch.distributed``'s gloo backend
through a store in a temporary folder (no network needed beyond the loopback gloo's sockets use), calls
``work(rank, world_size)`` in each, and returns what each returned, in rank order. Processes are forked, not
spawned, so ``work`` may be a function defined in a notebook. A rank that raises, dies or hangs past ``timeout``
ends every rank, and ``RanksFailed`` says which rank did what (a ``NotImplementedError`` when it met an exercise's stub: ``unfinished``). Each collective that ``torch.distributed`` sends
can be recorded (``recorded_collectives``) with whether it was sent while autograd's backward pass was running.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import multiprocessing
import multiprocessing.connection
import os
import tempfile
import time
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist

RANK_TIMEOUT = 20.0  # seconds for all the ranks together


class RanksFailed(RuntimeError):
    """A rank raised, died or hung; the message says which and how (what it raised, and where in the code that
    called into the course). ``hung``: a rank did not finish in time."""

    def __init__(self, message: str, hung: bool = False):
        super().__init__(message)
        self.hung = hung


def unfinished(stub_qualname: str | None) -> NotImplementedError:
    """What a rank that met an exercise's stub (``raise NotImplementedError()``) raises here: the stub's own error,
    without a message (so the grader says "not implemented yet"), with ``stub_qualname``, the function whose stub it
    was (so a notebook's demo cell says which exercise it waits for, ``coursetools.run_all``)."""
    error = NotImplementedError()
    error.stub_qualname = stub_qualname
    return error


def _rank_main(work, rank: int, world_size: int, store_path: str, send) -> None:
    # A forked child must not enter the OpenMP thread pool its parent started: GNU OpenMP is not fork-safe, and the
    # first parallel matmul hangs. One thread per rank, as one device per rank.
    torch.set_num_threads(1)
    try:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the loopback, which every sandbox has
        store = dist.FileStore(store_path, world_size)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
        try:
            result = work(rank, world_size)
        finally:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        send.send_bytes(_packed(("returned", result)))
    except BaseException as error:  # noqa: BLE001 - whatever a rank raises is reported by the parent
        if isinstance(error, NotImplementedError) and not error.args:
            from coursetools.run_all import stub_name

            send.send_bytes(_packed(("unfinished", stub_name(error.__traceback__))))
        else:
            send.send_bytes(_packed(("raised", _described(error))))


_LIBRARIES = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))  # torch's and the course's


def _described(error: BaseException) -> str:
    """What was raised, and where in the code that called into the course (a notebook's cell, say): its last frame
    outside torch and the course's packages."""
    said = traceback.format_exception_only(type(error), error)[-1].strip()
    theirs = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(_LIBRARIES)]
    if theirs:
        said += f" (line {theirs[-1].lineno} of {theirs[-1].filename}, in {theirs[-1].name})"
    return said


def _packed(value) -> bytes:
    """``value`` as bytes: tensors travel by value (a pipe's pickler would share their memory with a process
    that is about to end)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def run_ranks(work: Callable[[int, int], object], world_size: int = 2, timeout: float = RANK_TIMEOUT) -> list:
    """``[work(0, world_size), ..., work(world_size - 1, world_size)]``, each run in a forked process that has
    joined a gloo process group of ``world_size`` ranks. Raises ``RanksFailed`` when a rank raises, dies or does
    not finish within ``timeout`` seconds (the other ranks are ended then)."""
    context = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="ranks-") as folder:
        pipes = [context.Pipe(duplex=False) for _ in range(world_size)]
        processes = [
            context.Process(target=_rank_main, args=(work, rank, world_size, os.path.join(folder, "store"), send),
                            daemon=True)
            for rank, (_, send) in enumerate(pipes)
        ]
        try:
            for process in processes:
                process.start()
            return _results([receive for receive, _ in pipes], processes, timeout)
        finally:
            for process in processes:
                if process.is_alive():
                    process.kill()
                process.join(timeout=5)


# After one rank fails, how long the others have to report: a rank that met a stub reports at once, and when it
# exits first, its peers fail with it (gloo: "Connection closed by peer"); the stub, not their error, is the news.
FAILURE_GRACE = 2.0  # seconds


def _results(receivers: list, processes: list, timeout: float) -> list:
    """Each rank's result, in rank order, read as the ranks report (``multiprocessing.connection.wait``)."""
    outcomes: dict[int, tuple[str, object]] = {}
    deadline = time.monotonic() + timeout
    while len(outcomes) < len(receivers) and time.monotonic() < deadline:
        waiting = [receiver for rank, receiver in enumerate(receivers) if rank not in outcomes]
        for receiver in multiprocessing.connection.wait(waiting, timeout=max(0.0, deadline - time.monotonic())):
            rank = receivers.index(receiver)
            try:
                outcomes[rank] = torch.load(io.BytesIO(receiver.recv_bytes()), weights_only=True)
            except EOFError:
                outcomes[rank] = ("died", None)
            if outcomes[rank][0] != "returned":
                deadline = min(deadline, time.monotonic() + FAILURE_GRACE)
    for how, value in outcomes.values():
        if how == "unfinished":
            raise unfinished(value)
    for rank, process in enumerate(processes):
        how, value = outcomes.get(rank, (None, None))
        if how == "raised":
            raise RanksFailed(f"rank {rank} raised {value}")
        if how == "died" or (how is None and not process.is_alive()):
            raise RanksFailed(f"rank {rank} died (exit code {process.exitcode})")
    for rank in range(len(receivers)):
        if rank not in outcomes:
            raise RanksFailed(f"rank {rank} did not finish within {timeout:g} s (waiting for another rank?)", hung=True)
    return [outcomes[rank][1] for rank in range(len(receivers))]


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


class _RecordedWork:
    """An asynchronous collective's handle, which notes in its entry when ``wait()`` is called during backward."""

    def __init__(self, work, entry: dict):
        self._work, self._entry = work, entry

    def wait(self, *args, **kwargs):
        self._entry["waited_during_backward"] |= _in_backward()
        return self._work.wait(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._work, name)


_RECORDED = ("all_reduce", "broadcast", "reduce_scatter_tensor", "all_gather_into_tensor", "reduce", "all_gather")


@contextlib.contextmanager
def recorded_collectives(namespace: dict | None = None):
    """``with recorded_collectives(ns) as sent: ...``: ``sent`` lists, for each collective sent through
    ``torch.distributed`` (by the module's functions, or by the same functions bound to names in ``namespace``),
    ``{"name", "numel", "async", "during_backward", "time", "src", "ptr", "waited_during_backward"}``: when it was
    sent (``time.perf_counter()``), the rank it came from (``src``, for a broadcast), the address of its tensor's
    data (``ptr``: which tensor it was), and whether its ``work.wait()`` was called while autograd's backward pass
    ran (an asynchronous collective waited for in a hook blocks the backward pass). For one rank's process."""
    sent = []
    originals = {name: getattr(dist, name) for name in _RECORDED}

    def recording(name, function):
        parameters = inspect.signature(function).parameters

        def collective(*args, **kwargs):
            given = dict(zip(parameters, args, strict=False)) | kwargs
            first = args[0] if args else next(iter(kwargs.values()), None)
            tensors = first if isinstance(first, list | tuple) else [first]
            entry = {
                "name": name,
                "numel": sum(t.numel() for t in tensors if isinstance(t, torch.Tensor)),
                "async": bool(given.get("async_op", False)),
                "during_backward": _in_backward(),
                "time": time.perf_counter(),
                "src": given.get("src"),
                "ptr": tensors[0].data_ptr() if tensors and isinstance(tensors[0], torch.Tensor) else None,
                "waited_during_backward": False,
            }
            sent.append(entry)
            work = function(*args, **kwargs)
            return _RecordedWork(work, entry) if work is not None else None

        return collective

    stand_ins = {name: recording(name, function) for name, function in originals.items()}
    rebound = [key for key, value in (namespace or {}).items() if any(value is f for f in originals.values())]
    saved = {key: namespace[key] for key in rebound}
    for name, stand_in in stand_ins.items():
        setattr(dist, name, stand_in)
    for key in rebound:
        namespace[key] = stand_ins[next(n for n, f in originals.items() if saved[key] is f)]
    try:
        yield sent
    finally:
        for name, function in originals.items():
            setattr(dist, name, function)
        for key, value in saved.items():
            namespace[key] = value
