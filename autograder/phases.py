"""What a grading is doing as it goes: starting Python, running cells i/N, checks j/M.

``grading.grade(on_phase=...)`` calls ``on_phase`` with a ``Phase`` as each step begins. A phase is the
checker's own count of what it is about to do (the cell it is about to send to the worker, the check it is
about to run), never something the worker sends: the worker's replies are read only for results, as before,
so student code can neither forge nor hide a phase. Nor does a phase change a grade: only a display reads it.

``Display`` shows the phases of ``python -m autograder check`` on stderr: a tqdm bar on a terminal, which is
gone once the report is printed, and otherwise one plain line per phase (``grading: running cells 3/20
(cell 7)``); stdout holds only the report, as before.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

LABELS = {
    "starting": "starting Python",  # the worker imports torch and the notebook's adapters
    "restarting": "starting Python again",  # a cell or call ended or hung the worker
    "replaying": "replaying cells",  # the new worker runs again the cells that had run
    "cells": "running cells",
    "checks": "checks",
}
PREFIX = "grading: "  # the plain lines on stderr start with it


@dataclass(frozen=True)
class Phase:
    kind: str  # a key of LABELS
    step: int = 0  # the step now under way, from 1 (0: a phase of one step)
    total: int = 0  # how many steps the phase has (0: one)
    detail: str = ""  # "cell 7", an exercise's id, "sandboxed"

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    def __str__(self) -> str:
        counted = f" {self.step}/{self.total}" if self.total else ""
        return f"{self.label}{counted}" + (f" ({self.detail})" if self.detail else "")


def starting_detail(sandboxed: bool) -> str:
    return "sandboxed" if sandboxed else "without a sandbox"


class Display:
    """Shows phases on ``stream`` (stderr): a bar per phase on a terminal, a line per phase elsewhere.

    Call it with each phase, and ``close()`` it before printing anything else. A stream that can no longer be
    written (a closed pipe) ends the display, never the grading.
    """

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        try:
            self.terminal = self.stream.isatty()
        except (AttributeError, ValueError):
            self.terminal = False
        self._bar = None
        self._kind = None
        self._broken = False

    def __call__(self, phase: Phase) -> None:
        if self._broken:
            return
        try:
            if self.terminal:
                self._show(phase)
            else:
                print(PREFIX + str(phase), file=self.stream, flush=True)
        except (OSError, ValueError):  # the stream was closed: grading goes on unseen
            self._broken = True

    def _show(self, phase: Phase) -> None:
        from tqdm import tqdm

        # A counted phase's detail ("cell 7") goes after the bar, so that the bar stays put as it changes.
        desc = phase.label if phase.total else str(phase)
        if self._bar is None or phase.kind != self._kind:
            self.close()
            self._kind = phase.kind
            columns, lines = _size(self.stream)
            # no clock: it would stand still between steps, and a cell can take a minute
            self._bar = tqdm(
                total=phase.total or None,
                initial=phase.step,
                desc=desc,
                file=self.stream,
                leave=False,
                ncols=columns,
                nrows=lines,
                bar_format="{desc} {n_fmt}/{total_fmt} |{bar}|{postfix}" if phase.total else "{desc}...",
            )
        self._bar.set_description_str(desc, refresh=False)
        if phase.total:
            self._bar.set_postfix_str(phase.detail, refresh=False)
        self._bar.n = phase.step
        self._bar.refresh()

    def close(self) -> None:
        """Take the bar off the terminal (nothing to do for plain lines)."""
        bar, self._bar, self._kind = self._bar, None, None
        if bar is not None:
            try:
                bar.close()
            except (OSError, ValueError):
                self._broken = True


def _size(stream) -> tuple[int, int]:
    """The terminal's columns and lines (80 and 24 where it says 0, as a pseudo-terminal without a size does:
    tqdm would then draw nothing)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return 80, 24
    return size.columns or 80, size.lines or 24
