"""The process that runs a student's notebook code; started by ``sandbox.Worker``.

It executes notebook cells and calls the adapter functions of one notebook
(``autograder.adapters.<module>``) on the student's namespace. It decides nothing:
it only sends back what the student's code computed for the inputs it was given.

Usage: python -m autograder.worker ADAPTER_MODULE REQUEST_FD REPLY_FD
"""

from __future__ import annotations

import builtins
import importlib
import pickle
import sys

from autograder import wire
from autograder.errors import describe


def main() -> None:
    adapter_module, request_fd, reply_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # Everything the worker needs is imported before any student code runs.
    from IPython.core.interactiveshell import InteractiveShell

    adapters = importlib.import_module(adapter_module)
    shell = InteractiveShell.instance()
    namespace = shell.user_ns
    # Adapters, and the replies, run with the builtins as they were before student code.
    pristine_builtins = dict(vars(builtins))
    wire.send(reply_fd, wire.dump_reply({"nonce": None, "ok": True, "value": "ready"}))

    while True:
        request = pickle.loads(wire.receive(request_fd))
        reply = {"nonce": request["nonce"], "ok": True, "value": None}
        try:
            if request["op"] == "exec":
                code = compile(
                    shell.transform_cell(request["source"]), f"<cell {request['index']}>", "exec"
                )
                exec(code, namespace)
            else:
                function = getattr(adapters, request["name"])
                reply["value"] = wire.plain(function(namespace, *request["args"], **request["kwargs"]))
        except BaseException as error:  # noqa: BLE001 - SystemExit included: report, keep serving
            reply = {"nonce": request["nonce"], "ok": False, "error": describe(error)}
        vars(builtins).update(pristine_builtins)
        try:
            payload = wire.dump_reply(reply)
        except Exception as error:  # noqa: BLE001
            payload = wire.dump_reply(
                {"nonce": request["nonce"], "ok": False, "error": f"unsendable result: {error}"}
            )
        wire.send(reply_fd, payload)


if __name__ == "__main__":
    main()
