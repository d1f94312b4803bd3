"""What a student sees: the in-notebook ``check`` and the text of a report."""

from __future__ import annotations

from autograder.exercises import ExerciseResult, find_exercise, run_exercise
from autograder.impl import LocalImpl


class ChecksFailed(AssertionError):
    """Raised in the notebook when a check fails; IPython shows only our message."""

    def _render_traceback_(self):
        return [str(self)]


def render(result: ExerciseResult) -> str:
    ok, bad = "✓", "✗"
    lines = []
    for r in result.results:
        kind = " (hidden)" if r.check.hidden else ""
        lines.append(f"{ok if r.passed else bad} {r.check.description}{kind}")
        if not r.passed:
            lines += [f"    {line}" for line in r.message.splitlines()]
    return "\n".join(lines)


def check(exercise_id: str, namespace: dict, hidden: bool = False) -> None:
    """Run an exercise's visible (or, for instructors, hidden) checks on this notebook's code."""
    exercise, adapters = find_exercise(exercise_id)
    result = run_exercise(exercise, LocalImpl(namespace, adapters), visible=not hidden, hidden=hidden)
    print(render(result))
    if not result.passed:
        failed = sum(not r.passed for r in result.results)
        raise ChecksFailed(f"{exercise.title}: {failed} of {len(result.results)} checks failed (see above).")
    print(f"All {len(result.results)} {'hidden' if hidden else 'visible'} checks passed.")
