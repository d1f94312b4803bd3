"""A time limit on one call into student code, set in the process that runs it, and where that code was when it
ran out.

``within(seconds)`` arms SIGALRM; its handler raises ``TimeLimitExceeded`` in whatever Python code runs then: a
``while True`` loop, a slow Python loop, a sleep. The student's process stays alive and keeps what it holds, so
nothing is restarted or replayed, and the error's traceback says which line of the student's code was running
(``errors.describe``). Code stuck inside one C call (a huge matmul) sees the signal only when that call returns;
code that catches the error or replaces the handler goes on running. In the grading worker, the grader's own
timeout, a little longer (``process.HARD_TIMEOUT_GRACE``), then ends the process as it always did.

``skip_from_now_on(error)`` is the grading worker's answer to code that ran out of time: the function it was stuck
in is replaced, for the rest of this worker's life, by one that raises ``RanOutBefore`` at once, so every later
cell and check that calls the same code costs nothing instead of the whole time limit again. It changes only the
student's own objects in the grading worker; a notebook's kernel never does it (its test cells stop the
exercise's other checks instead, ``exercises.run_exercise``).

Both errors derive from BaseException, so a student's ``except Exception`` does not swallow them.
"""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
import types

from autograder.errors import RanOutBefore, TimeLimitExceeded, student_frames

__all__ = ["RanOutBefore", "TimeLimitExceeded", "armed", "skip_from_now_on", "within"]


def armed() -> bool:
    """Whether ``within`` can set a limit here: SIGALRM exists (not on Windows) and this is the main thread."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def within(seconds: float | None):
    """Raise ``TimeLimitExceeded`` in the code run inside, once ``seconds`` have passed (None: no limit)."""
    if seconds is None or not armed():
        yield
        return

    def ring(signum, frame):
        raise TimeLimitExceeded(seconds)

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def skip_from_now_on(error: TimeLimitExceeded, where: str) -> None:
    """Make the function whose code ran out of time raise ``RanOutBefore`` at once from now on.

    The innermost of the student's frames that belongs to a function is chosen (a comprehension's or a cell's
    own code belongs to none: the next frame out is taken). Every function object sharing that code is changed
    (a method's, each closure made from it).
    """
    for frame in reversed(student_frames(error.__traceback__)):
        functions = [
            f
            for f in gc.get_referrers(frame.f_code)
            if isinstance(f, types.FunctionType) and f.__code__ is frame.f_code
        ]
        if functions:
            for function in functions:
                function.__code__ = _raiser(len(frame.f_code.co_freevars), error.seconds, where)
            return


def _raiser(free_variables: int, seconds: float, where: str) -> types.CodeType:
    """The code of a function that raises ``RanOutBefore`` at once, with ``free_variables`` free variables: a
    function's code can only be replaced by one with as many as its closure holds."""
    names = [f"cell_{n}" for n in range(free_variables)]
    touch = f"        {', '.join(names)}\n" if names else ""
    source = (
        "def outer():\n"
        + "".join(f"    {name} = None\n" for name in names)
        + "    def ran_out(*args, **kwargs):\n"
        + touch
        + "        raise __import__('autograder.errors', fromlist=['RanOutBefore'])"
        + f".RanOutBefore({seconds!r}, {where!r})\n"
        + "    return ran_out\n"
    )
    scope: dict = {}
    exec(compile(source, "<autograder: ran out of time earlier>", "exec"), scope)  # noqa: S102 - our own source
    return scope["outer"]().__code__
