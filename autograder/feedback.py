"""What a student sees: the in-notebook ``check`` and the text of a report."""

from __future__ import annotations

from autograder.exercises import ExerciseResult, find_exercise, run_exercise
from autograder.impl import LocalImpl
from autograder.sandbox import DEFAULT_TIMEOUT
from coursetools import cell_sources


class ChecksFailed(AssertionError):
    """Raised in the notebook when a check fails; IPython shows only our message."""

    def _render_traceback_(self):
        return [str(self)]


def render(result: ExerciseResult, passed: bool | None = None) -> str:
    """Each check, a line; under each failing one, why, except that a broken rule is said once. ``passed``: only
    the checks that passed (True) or failed (False)."""
    ok, bad = "✓", "✗"
    lines, rule_said = [], False
    for r in result.results:
        if passed is not None and r.passed != passed:
            continue
        kind = " (hidden)" if r.check.hidden else ""
        lines.append(f"{ok if r.passed else bad} {r.check.description}{kind}")
        if not r.passed:
            why = "(the rule above)" if r.broke_rule and rule_said else r.message
            lines += [f"    {line}" for line in why.splitlines()]
            rule_said = rule_said or r.broke_rule
    return "\n".join(lines)


def shown_by_test_cell(result: ExerciseResult) -> ExerciseResult:
    """Of a run of every check (``run_exercise``), what an exercise's test cell (``check``) shows in JupyterLab:
    the visible checks (with the static half of the rules, read from the answer cell's source) alone when one of
    them fails, since the hidden ones then do not run, else all of them."""
    visible = [r for r in result.results if not r.check.hidden]
    return ExerciseResult(result.exercise, result.results if all(r.passed for r in visible) else visible, result.note)


def check(exercise_id: str, namespace: dict, hidden: bool = False, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Run an exercise's checks on this notebook's code, as its test cell does.

    First the visible checks; once they all pass, the hidden ones too, which grade the exercise: a mistake that
    only a hidden check catches (another shape, dtype or seed) is named here, in the notebook, not first in the
    grade. Most runs of a test cell meet a failing visible check and stop there, so the extra time is paid once
    the exercise looks done. ``hidden=True`` (the instructors' hidden-test line) runs the hidden checks alone.

    Each call into the student's code has grading's time limit, ``timeout`` seconds (``LocalImpl``); once one
    runs out, the exercise's other checks are not run. An interrupt (JupyterLab's stop button) ends the check the
    same way. Neither prints a traceback through the grader's modules: the message names the student's line.
    """
    try:
        _check(exercise_id, namespace, hidden, timeout)
    except KeyboardInterrupt:  # in the grader's own code (in the student's, LocalImpl says where it was)
        raise ChecksFailed(f"{exercise_id}: interrupted while checking; run the test cell again when ready") from None


def _check(exercise_id: str, namespace: dict, hidden: bool, timeout: float) -> None:
    exercise, adapters = find_exercise(exercise_id)
    impl = LocalImpl(namespace, adapters, timeout=timeout)
    answer = cell_sources.answer_source()  # in JupyterLab: the rules are read from the answer cell too
    result = run_exercise(
        exercise,
        impl,
        visible=not hidden,
        hidden=hidden,
        source=answer[0] if answer else None,
        context=answer[1] if answer else (),
    )
    if not hidden and result.passed and any(c.hidden for c in exercise.checks):
        graded = run_exercise(exercise, impl, visible=False, hidden=True)
        result = ExerciseResult(exercise, result.results + graded.results, result.note)
    counts = {kind: sum(r.check.hidden == (kind == "hidden") for r in result.results) for kind in ("visible", "hidden")}
    if result.passed:
        print(render(result))
    else:
        # The checks that passed print; the failed ones, with why, are the error's own text, which is all that
        # nbgrader's Validate button shows of a failing cell.
        if shown := render(result, passed=True):
            print(shown)
        failed = [r for r in result.results if not r.passed]
        if not hidden and all(r.check.hidden for r in failed):
            summary = (
                f"{exercise.title}: the visible checks pass, but {len(failed)} of the {counts['hidden']} "
                "hidden checks, which grade it too, fail:"
            )
        else:
            summary = f"{exercise.title}: {len(failed)} of {len(result.results)} checks failed:"
        raise ChecksFailed(f"{summary}\n{render(result, passed=False)}")
    said = " and ".join(f"{n} {kind}" for kind, n in counts.items() if n)
    print(f"All {said} checks passed.")
