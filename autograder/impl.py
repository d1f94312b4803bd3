"""The seam between the checks and the student's code.

A check sees ``impl``; ``impl.some_adapter(*args)`` runs
``autograder.adapters.<notebook>.some_adapter(namespace, *args)`` on the student's
namespace and returns what it computed as plain tensors and containers.

- ``LocalImpl`` calls the adapter in this process: the notebook's own visible tests.
- ``RemoteImpl`` calls it in the worker process: grading, where student code must
  never share a process with the verdict.

An exercise's rules (``autograder.rules``) are enforced around every call (``_with_rules``).

Both send the result through the same serialisation, so a check sees the same data.
"""

from __future__ import annotations

import copy
import importlib

from autograder import wire
from autograder.adapters import adapter
from autograder.errors import RuleBroken, StudentCodeError, describe, is_stub
from autograder.process import StudentProcess
from autograder.rules import enforced


class LocalImpl:
    def __init__(self, namespace: dict, adapter_module: str, rules: tuple = ()):
        self._namespace = namespace
        self._adapters = importlib.import_module(adapter_module)
        self._rules = [rule.to_wire() for rule in rules]

    def _with_rules(self, rules) -> LocalImpl:
        """The same implementation, with ``rules`` (``autograder.rules.Rule``) enforced in every call."""
        return LocalImpl(self._namespace, self._adapters.__name__, rules)

    def __getattr__(self, name: str):
        if name.startswith("__"):  # copy's and pickle's probes: not an adapter
            raise AttributeError(name)
        function = adapter(self._adapters, name)

        def call(*args, **kwargs):
            args, kwargs = copy.deepcopy((args, kwargs))  # student code cannot edit our inputs
            try:
                with enforced(self._rules, self._namespace):
                    value = function(self._namespace, *args, **kwargs)
            except Exception as error:  # noqa: BLE001
                raise StudentCodeError(
                    describe(error), stub=is_stub(error), rule=isinstance(error, RuleBroken)
                ) from None
            return wire.load_reply(wire.dump_reply(wire.plain(value)))

        return call


class RemoteImpl:
    def __init__(self, process: StudentProcess, rules: tuple = ()):
        self._process = process
        self._rules = [rule.to_wire() for rule in rules]

    def _with_rules(self, rules) -> RemoteImpl:
        return RemoteImpl(self._process, rules)

    def __getattr__(self, name: str):
        if name.startswith("__"):  # copy's and pickle's probes: not an adapter
            raise AttributeError(name)
        return lambda *args, **kwargs: self._process.call(name, args, kwargs, self._rules)
