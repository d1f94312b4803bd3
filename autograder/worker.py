"""The process that runs a student's notebook code; started by ``process.Worker``.

It executes notebook cells and calls the adapter functions of one notebook
(``@adapter`` in ``autograder.notebooks.<module>``) on the student's namespace. It decides nothing:
it only sends back what the student's code computed for the inputs it was given, and
what the cells showed. Before any student code runs it gives up root (when started
by root, inside the sandbox) and applies the resource limits.

Usage: python -I -B -m autograder.worker REQUEST_FD REPLY_FD SETTINGS_JSON (the sandbox's settings, and the
modules to import first: ``process.Worker``)
(``-I``: the working directory, the student's folder, is not on ``sys.path`` until student code runs.)
The first request names the notebook's module (``{"adapters": "autograder.notebooks.nb..."}``): the checker
starts the worker before it has imported that module's checks, so that the worker imports torch and IPython
while the checker imports its checks; the worker says it is ready once it has imported that module.
"""

from __future__ import annotations

import builtins
import importlib
import json
import linecache
import os
import pickle
import sys

from autograder import outputs, time_limit, wire
from autograder.errors import (
    RanOutBefore,
    RuleBroken,
    TimeLimitExceeded,
    cell_number,
    describe,
    is_stub,
    running_line,
)
from autograder.rules import enforced
from autograder.sandbox import Limits


def confine(settings: dict) -> tuple[Limits, list[str]]:
    """Switch to the sandbox's own user id (if any), then set the limits; both are irreversible.

    Returns the limits and the ones that could not be set.
    """
    uid = settings.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    limits = Limits(**settings["limits"])
    return limits, limits.apply(processes=settings["sandboxed"])


def preload(imports: tuple[str, ...] | list[str] = ()) -> None:
    """Import everything the worker needs before any student code runs (a zygote does it once for many workers),
    and ``imports``, the modules its notebook's cells will import (``autograder.notebooks.WORKER_IMPORTS``)."""
    import torch  # noqa: F401 - the replies' format (autograder.wire) and every adapter need it
    from IPython.core.interactiveshell import InteractiveShell  # noqa: F401
    from traitlets.config import Config  # noqa: F401

    from autograder.adapters import resolve  # noqa: F401

    for module in imports:
        importlib.import_module(module)


def main() -> None:
    """A cold start: a fresh process, given up root and limited first, then importing (``zygote`` forks warm ones)."""
    request_fd, reply_fd = int(sys.argv[1]), int(sys.argv[2])
    settings = json.loads(sys.argv[3])
    limits, unset = confine(settings)
    serve(request_fd, reply_fd, limits, unset, settings)


def serve(request_fd: int, reply_fd: int, limits: Limits, unset: list[str], settings: dict) -> None:
    """Run cells and adapter calls from ``request_fd`` until the checker closes it; ``confine`` has run."""
    if unset and settings["sandboxed"]:  # grading: no student code runs with a limit missing
        wire.send(reply_fd, wire.dump_reply({"nonce": None, "ok": False, "error": "; ".join(unset)}))
        return
    preload(settings["imports"])  # everything the worker needs is imported before any student code runs
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from autograder.adapters import resolve

    shell = InteractiveShell.instance(config=Config({"HistoryManager": {"enabled": False}}))
    namespace = shell.user_ns
    shell.transform_cell("pass")  # the transformers' own lazy imports, before the student's folder is on the path
    adapters = importlib.import_module(pickle.loads(wire.receive(request_fd))["adapters"])
    # Started with -I, so the folder is not on sys.path yet; as in a Jupyter kernel, the student's own modules
    # beside the notebook import from here on (a module already imported, such as json, stays the grader's).
    sys.path.insert(0, os.getcwd())
    # Adapters, and the replies, run with the builtins as they were before student code.
    pristine_builtins = dict(vars(builtins))

    def explain(error: BaseException) -> str:
        text = describe(error)
        limit = limits.explain(error)
        return f"{text}: {limit}" if limit else text

    wire.send(reply_fd, wire.dump_reply({"nonce": None, "ok": True, "value": {"warnings": unset}}))
    while True:
        try:
            request = pickle.loads(wire.receive(request_fd))
        except wire.WireError:  # the checker is done with this worker
            return
        reply = {"nonce": request["nonce"], "ok": True, "value": None}
        recorder = outputs.Recorder(shell, record=bool(request.get("record")))
        try:
            if request["op"] == "exec":
                with recorder.capturing(), time_limit.within(request.get("timeout")):
                    body, last = outputs.split_last_expression(shell.transform_cell(request["source"]))
                    name = f"<cell {cell_number(request['index'])}>"
                    remember_source(name, request["source"])
                    # dont_inherit: compile as a kernel does, without this module's `from __future__ import annotations`
                    exec(compile(body, name, "exec", dont_inherit=True), namespace)
                    if last is not None:
                        recorder.result(
                            eval(compile(last, name, "eval", dont_inherit=True), namespace), request["index"]
                        )
            else:
                function = resolve(adapters, request["name"])
                with enforced(request["rules"], namespace), time_limit.within(request.get("timeout")):
                    value = function(namespace, *request["args"], **request["kwargs"])
                reply["value"] = wire.plain(value)
        except BaseException as error:  # noqa: BLE001 - SystemExit included: report, keep serving
            vars(builtins).update(pristine_builtins)
            reply = {
                "nonce": request["nonce"],
                "ok": False,
                "error": explain(error),
                "stub": is_stub(error),
                "rule": isinstance(error, RuleBroken),
                "ran_out": isinstance(error, TimeLimitExceeded),
            }
            if isinstance(error, TimeLimitExceeded) and not isinstance(error, RanOutBefore):
                # Every later cell and check that calls the code it was stuck in fails at once, not after the
                # whole time limit again.
                time_limit.skip_from_now_on(error, stuck_in(error))
            recorder.outputs.append(outputs.error(type(error).__name__, reply["error"]))
        vars(builtins).update(pristine_builtins)
        if request["op"] == "exec":
            reply["outputs"] = recorder.outputs
        try:
            payload = wire.dump_reply(reply)
        except Exception as error:  # noqa: BLE001
            payload = wire.dump_reply({"nonce": request["nonce"], "ok": False, "error": f"unsendable result: {error}"})
        wire.send(reply_fd, payload)


def remember_source(name: str, source: str) -> None:
    """Keep a cell's source where tracebacks look for lines, so that a message can quote the student's line."""
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)


def stuck_in(error: TimeLimitExceeded) -> str:
    """``line 7 of cell 9, in forward: `while True:` ``: the student's line that was running when time ran out."""
    return running_line(error) or "the grader's call into your code"


if __name__ == "__main__":
    main()
