"""The seam between the checks and the student's code.

A check sees ``impl``; ``impl.call(some_adapter, *args)`` runs ``some_adapter(namespace, *args)``, an
adapter of the check's own notebook module (``autograder/notebooks/nb<notebook>.py``), on the student's
namespace and returns what it computed as plain tensors and containers. The adapter is named by reference
(a misspelt one is an undefined name, which ruff reports), and only a function of the notebook's own module
marked ``@adapter`` is ever called (``adapters.resolve``).

- ``LocalImpl`` calls the adapter in this process: the notebook's own visible tests.
- ``RemoteImpl`` calls it in the worker process: grading, where student code must
  never share a process with the verdict.

An exercise's rules (``autograder.rules``) are enforced around every call (``with_rules``).

Both send the result through the same serialisation, so a check sees the same data.
"""

from __future__ import annotations

import copy
import importlib

from autograder import time_limit, wire
from autograder.adapters import resolve
from autograder.errors import (
    RuleBroken,
    StudentCodeError,
    TimeLimitExceeded,
    describe,
    is_stub,
    running_line,
)
from autograder.process import StudentProcess
from autograder.rules import enforced
from autograder.sandbox import DEFAULT_TIMEOUT


class LocalImpl:
    """Each call runs under the time limit that grading gives it (``timeout`` seconds, ``autograder.time_limit``),
    and a Jupyter interrupt (the stop button) ends it the same way: both are said as where the code was."""

    def __init__(self, namespace: dict, adapter_module: str, rules: tuple = (), timeout: float = DEFAULT_TIMEOUT):
        self._namespace = namespace
        self._adapters = importlib.import_module(adapter_module)
        self._rules = [rule.to_wire() for rule in rules]
        self._timeout = timeout

    def with_rules(self, rules) -> LocalImpl:
        """The same implementation, with ``rules`` (``autograder.rules.Rule``) enforced in every call."""
        return LocalImpl(self._namespace, self._adapters.__name__, rules, self._timeout)

    def call(self, function, *args, **kwargs):
        """``function(namespace, *args, **kwargs)``: an adapter of this notebook, named by reference."""
        function = resolve(self._adapters, reference(function))
        args, kwargs = copy.deepcopy((args, kwargs))  # student code cannot edit our inputs
        try:
            with enforced(self._rules, self._namespace), time_limit.within(self._timeout):
                value = function(self._namespace, *args, **kwargs)
        except KeyboardInterrupt as error:
            where = running_line(error)
            raise StudentCodeError(
                f"was interrupted: it was running {where}" if where else "was interrupted", ran_out=True
            ) from None
        except (Exception, TimeLimitExceeded) as error:  # noqa: BLE001
            raise StudentCodeError(
                describe(error),
                stub=is_stub(error),
                rule=isinstance(error, RuleBroken),
                ran_out=isinstance(error, TimeLimitExceeded),
            ) from None
        return wire.load_reply(wire.dump_reply(wire.plain(value)))


class RemoteImpl:
    def __init__(self, process: StudentProcess, rules: tuple = ()):
        self._process = process
        self._rules = [rule.to_wire() for rule in rules]

    def with_rules(self, rules) -> RemoteImpl:
        return RemoteImpl(self._process, rules)

    def call(self, function, *args, **kwargs):
        """``function(namespace, *args, **kwargs)`` in the worker: the adapter travels as ``module:name``, which
        the worker resolves only within the notebook's module (``adapters.resolve``)."""
        return self._process.call(reference(function), args, kwargs, self._rules)


def reference(function) -> str:
    """``module:name`` of an adapter function, as it travels to the worker."""
    return f"{function.__module__}:{function.__name__}"
