"""Exercises, their checks, and running the checks against one implementation.

A notebook's module (``autograder/notebooks/nb<notebook>.py``) declares its exercises::

    EMBEDDING = Exercise("embedding", "Embedding from scratch", points=3)

    @EMBEDDING.visible
    def test_lookup(impl):
        "forward returns the rows of weight"
        ...

Each check is an ordinary pytest-style function of one argument, ``impl``: the
implementation under test, reached only through the notebook's adapter functions
(marked ``@adapter`` in the same module). It fails by raising AssertionError (usually
``CheckFailed`` through ``autograder.expect``) with a message for the student.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from autograder.errors import GradingError, SandboxError, StudentCodeError
from autograder.rules import Rule
from coursetools.notebook_vocabulary import STUB_LINE, test_id


@dataclass
class Check:
    function: Callable
    hidden: bool

    @property
    def name(self) -> str:
        return self.function.__name__

    @property
    def description(self) -> str:
        return (self.function.__doc__ or self.name).strip().splitlines()[0]


@dataclass
class Exercise:
    id: str  # the grade_id of the answer cell; its test cell's is test_id(id): coursetools.notebook_vocabulary
    name: str  # what it builds, as its heading names it; the number comes from its place (``title``)
    points: int
    checks: list[Check] = field(default_factory=list)
    rules: tuple[Rule, ...] = ()  # what the notebook forbids (autograder.rules), enforced with every check
    number: int = 0  # its place among its notebook's exercises, from 1: set by NotebookChecks, stamped into the heading

    @property
    def title(self) -> str:
        """ "Exercise 2: RMSNorm", as the notebook's heading numbers it (tools/stamp.py writes the number there)."""
        return f"Exercise {self.number}: {self.name}" if self.number else self.name

    @property
    def test_cell_id(self) -> str:
        """The grade id of the exercise's test cell (nbgrader's, not the Jupyter cell id)."""
        return test_id(self.id)

    def visible(self, function):
        self.checks.append(Check(function, hidden=False))
        return function

    def hidden(self, function):
        self.checks.append(Check(function, hidden=True))
        return function


@dataclass
class NotebookChecks:
    notebook: str  # file stem, e.g. "01_tokens_embeddings"
    exercises: list[Exercise]
    adapter_module: str  # the notebook's module: the worker imports it and calls only its @adapter functions
    oracle_imports: tuple[str, ...] = ()  # slow imports the checks will need (the module's ORACLE_IMPORTS)

    def __post_init__(self):
        for number, exercise in enumerate(self.exercises, start=1):  # the order of the notebook's answer cells
            exercise.number = number


def module_name(notebook: str) -> str:
    return "nb" + notebook


def checks_for(notebook: str) -> NotebookChecks:
    """The exercises of a notebook, by its file stem (``autograder/notebooks/nb<stem>.py``)."""
    try:
        module = importlib.import_module(f"autograder.notebooks.{module_name(notebook)}")
    except ModuleNotFoundError:
        raise LookupError(f"no checks for a notebook named {notebook!r}") from None
    return NotebookChecks(
        notebook,
        list(module.EXERCISES),
        module.__name__,
        tuple(getattr(module, "ORACLE_IMPORTS", ())),
    )


@functools.cache
def exercise_index() -> dict[str, str]:
    """Exercise id -> notebook, read from the notebook modules' ``Exercise("id", ...)`` declarations without
    importing them: a test cell's ``check`` imports its own notebook's checks (and their oracles) only."""
    from autograder.notebooks import NOTEBOOKS

    index = {}
    for notebook in NOTEBOOKS:
        spec = importlib.util.find_spec(f"autograder.notebooks.{module_name(notebook)}")
        source = Path(spec.origin).read_text(encoding="utf-8")
        index |= dict.fromkeys(_DECLARED.findall(source), notebook)
    return index


_DECLARED = re.compile(r"""\bExercise\(\s*["']([^"']+)["']""")  # tests/test_adapters_wired.py holds it to the imports


def find_exercise(exercise_id: str) -> tuple[Exercise, str]:
    """The exercise with this id in any notebook, and its notebook's module (whose adapters the checks call)."""
    notebook = exercise_index().get(exercise_id)
    if notebook is not None:
        checks = checks_for(notebook)
        for exercise in checks.exercises:
            if exercise.id == exercise_id:
                return exercise, checks.adapter_module
    raise LookupError(f"no exercise called {exercise_id!r}")


class ExerciseState(StrEnum):
    """Where a student stands on an exercise; its value is what `check --json`, the verdicts and the tables say."""

    PASSED = "passed"
    FAILING = "failing"
    NOT_STARTED = "not started"


class Status(StrEnum):
    """How one check ended, decided where it ends (``run_check``, ``rules_result``, ``run_exercise``): the
    reports (``class_report``, ``progress``, the capstone's stack) read these, never the messages."""

    PASSED = "passed"
    FAILED = "failed"  # an assertion of the check, the student's code raising, or a result it cannot check
    NOT_IMPLEMENTED = "not implemented"  # the answer still raises the stub's NotImplementedError
    NOT_RUN = "not run"  # an earlier check stopped the student's process
    RULE = "rule"  # the exercise's rule, read from the answer cell or refused in a call


@dataclass
class CheckResult:
    check: Check
    status: Status
    message: str = ""
    ran_out: bool = False  # the student's code did not finish within its time limit (the exercise's later checks skip)

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED

    @property
    def broke_rule(self) -> bool:
        return self.status is Status.RULE

    def to_json(self) -> dict:
        return {
            "check": self.check.name,
            "description": self.check.description,
            "hidden": self.check.hidden,
            "status": str(self.status),
            "message": self.message,
        }

    def same_reason(self, other: CheckResult) -> bool:
        """Whether ``other`` failed for the reason this one did: the same message, or the exercise's rule (said
        once, whether read from the answer cell or met in a call, where the message also names the line)."""
        return self.message == other.message or (self.broke_rule and other.broke_rule)


@dataclass
class ExerciseResult:
    exercise: Exercise
    results: list[CheckResult]
    note: str = ""  # e.g. "your answer cell raised ..."

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def points(self) -> int:
        return self.exercise.points if self.passed else 0

    @property
    def state(self) -> ExerciseState:
        """Passed, not started (every failing check met the stub and none passed) or failing."""
        if self.passed:
            return ExerciseState.PASSED
        failed = [r for r in self.results if not r.passed]
        ran = [r for r in self.results if r.check.function is not follows_the_rules]  # a stub follows every rule
        started = any(r.passed for r in ran) or any(r.status is not Status.NOT_IMPLEMENTED for r in failed)
        return ExerciseState.FAILING if started else ExerciseState.NOT_STARTED

    @property
    def reason(self) -> str:
        """The first line of why it fails ("" when it passes): the answer cell's error, else the first failed check's."""
        failed = [r for r in self.results if not r.passed]
        if not failed:
            return ""
        return (self.note or failed[0].message or failed[0].check.description).splitlines()[0]

    def to_json(self) -> dict:
        """The verdict as data: what ``check --json`` prints and the nbgrader plugin keeps beside the test cell."""
        return {
            "id": self.exercise.id,
            "passed": self.passed,
            "points": self.points,
            "max_points": self.exercise.points,
            "message": self.message,
            "state": self.state,
            "reason": self.reason,
            "note": self.note,
            "checks": [r.to_json() for r in self.results],
        }

    @property
    def message(self) -> str:
        failed = [r for r in self.results if not r.passed]
        if not failed:
            return f"all {len(self.results)} checks passed"
        first = failed[0]  # one reason shared by several checks is said once
        lines = [self.note] if self.note else []
        lines.append(f"{first.check.description}: {first.message}")
        lines += [f"{r.check.description}: {r.message}" for r in failed[1:] if not first.same_reason(r)]
        repeats = sum(first.same_reason(r) for r in failed[1:])
        if repeats:
            lines.append(f"(the same for {repeats} more check{'s' * (repeats > 1)})")
        return "\n".join(lines)


@dataclass(frozen=True)
class CheckVerdict:
    """One check's entry of a verdict read back from data (``CheckResult.to_json``), its status an enum again."""

    check: str
    description: str
    hidden: bool
    status: Status
    message: str

    @classmethod
    def from_json(cls, data: dict) -> CheckVerdict:
        return cls(
            str(data["check"]),
            str(data["description"]),
            bool(data["hidden"]),
            Status(data["status"]),
            str(data["message"]),
        )


@dataclass(frozen=True)
class Verdict:
    """An exercise's verdict read back from data (``ExerciseResult.to_json``, kept beside an autograded test cell):
    what the reports read, with its state and each check's status as enums, never compared as strings."""

    id: str
    passed: bool
    state: ExerciseState
    note: str = ""
    checks: tuple[CheckVerdict, ...] = ()

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        """Raises KeyError, TypeError or ValueError (an unknown state or status) for data that is not a verdict."""
        checks = tuple(CheckVerdict.from_json(check) for check in data.get("checks", ()))
        return cls(
            str(data["id"]), bool(data["passed"]), ExerciseState(data["state"]), str(data.get("note", "")), checks
        )


NOT_IMPLEMENTED = f"not implemented yet: replace `{STUB_LINE}` with your code"


def run_check(check: Check, impl) -> CheckResult:
    try:
        check.function(impl)
    except AssertionError as error:
        return CheckResult(check, Status.FAILED, str(error) or "an assertion failed")
    except StudentCodeError as error:
        text = str(error)
        if error.stub:
            return CheckResult(
                check, Status.NOT_IMPLEMENTED, NOT_IMPLEMENTED + f" {text[len('NotImplementedError') :].strip()}"
            )
        if error.rule:  # its message is the rule, and what broke it
            return CheckResult(check, Status.RULE, text)
        if error.ran_out:  # says what happened and where, in the student's words
            return CheckResult(check, Status.FAILED, f"your code {text}", ran_out=True)
        return CheckResult(check, Status.FAILED, f"your code raised {text}")
    except (SandboxError, GradingError):
        raise
    except Exception as error:  # noqa: BLE001 - the student's result broke the check itself
        return CheckResult(check, Status.FAILED, f"could not check your result ({type(error).__name__}: {error})")
    return CheckResult(check, Status.PASSED)


def follows_the_rules(exercise: Exercise, source: str, context: list[str]) -> list[str]:
    """follows the exercise's rules (read from your answer cell)"""
    # The static reading of the rules; its name and docstring are that check's in the results (``rules_result``).
    return [rule.message(found) for rule in exercise.rules if (found := rule.violations(source, context))]


def rules_result(exercise: Exercise, source: str, context: list[str] = ()) -> CheckResult:
    """The static half of an exercise's rules, on the grader's side: the answer cell's source, read."""
    broken = follows_the_rules(exercise, source, context)
    return CheckResult(
        Check(follows_the_rules, hidden=False), Status.RULE if broken else Status.PASSED, "\n".join(broken)
    )


def checks_to_run(exercise: Exercise, *, visible: bool = True, hidden: bool = True, source: str | None = None) -> int:
    """How many results ``run_exercise`` gives with these arguments: one per check it runs (or skips)."""
    read = bool(exercise.rules) and source is not None and visible  # the rules, read from the source
    return read + sum(hidden if check.hidden else visible for check in exercise.checks)


def run_exercise(
    exercise: Exercise,
    impl,
    *,
    visible: bool = True,
    hidden: bool = True,
    note: str = "",
    source: str | None = None,
    context: list[str] = (),
    on_check: Callable[[], None] | None = None,
) -> ExerciseResult:
    """Run the chosen checks; once a check stops the student's process, or its code runs out of time, skip the rest.

    With its rules, every call into the student's code refuses what they forbid; given the answer
    cell's ``source`` (and the notebook's other cells as ``context``, for their imports), the rules
    are also read from the source first. ``on_check()`` is called as each check begins (``checks_to_run``
    counts them), to show how far grading is.
    """
    results, stopped = [], None
    begin = on_check or (lambda: None)
    if exercise.rules:
        impl = impl.with_rules(exercise.rules)
        if source is not None and visible:
            begin()
            results.append(rules_result(exercise, source, context))
    for check in exercise.checks:
        if (check.hidden and not hidden) or (not check.hidden and not visible):
            continue
        begin()
        if stopped:
            results.append(CheckResult(check, Status.NOT_RUN, f"not run: {stopped}"))
            continue
        try:
            results.append(run_check(check, impl))
        except SandboxError as error:
            results.append(CheckResult(check, Status.FAILED, str(error)))
            stopped = "an earlier check of this exercise stopped the process running your code"
            continue
        if results[-1].ran_out:  # each of the other checks would wait as long again, most likely on the same code
            stopped = "an earlier check of this exercise ran out of time in your code"
    return ExerciseResult(exercise, results, note)
