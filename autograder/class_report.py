"""A class report after autograding: ``python -m autograder report ASSIGNMENT [--output FILE] [--top N]``.

Run from the course root (where ``nbgrader_config.py`` is), after ``grade-class`` or ``nbgrader
autograde``. It writes one self-contained HTML page (default ``reports/ASSIGNMENT.html`` in the course
folder; no scripts, no external files) and prints a table of each exercise's pass rate. The page has:

- each exercise's pass rate, with how many submissions failed it and how many left it untouched;
- the mistakes the class made most: the failed checks, grouped across students (below), with who made each;
- each student's score and how each exercise went for them;
- the histogram of the scores (an inline SVG, described in words and in a table);
- the submissions that could not be graded, and why.

Where it reads:

- **Scores** from nbgrader's gradebook (``nbgrader.api.Gradebook``): a test cell passed when its
  score is its maximum, so a score changed by hand in formgrader counts. The histogram is of each
  submission's total score.
- **Mistakes** from the autograded notebooks (``autograded/STUDENT/ASSIGNMENT/``), where
  ``TrustedVerdict`` kept each test cell's verdict as data in the cell's metadata
  (``nbgrader_plugin.verdict_of``: ``ExerciseResult.to_json``, with each check's status as it was decided,
  ``exercises.Status``). The gradebook keeps only scores. Each failed exercise of each student counts once,
  by its reason as ``ExerciseResult.reason`` gives it: the answer cell's error if it raised one, else the
  first failed check, so the symptoms that follow from one mistake in the later checks are not counted as
  more mistakes. A check that met the untouched stub (``not implemented``) or was ``not run`` is no mistake
  and is passed over; an exercise failed only by such checks counts as not started. A mistake is that
  check's description and the first line of its message, which names the mistake the check recognised
  ("eps is added outside the square root") with the student's own numbers: a mistake groups the messages
  that differ only in their numbers, and shows them with each number that differs among its students as
  ``#`` (a number every one of them got, "divide by d - 1", "correction=0", is the mistake's own). The course keeps no list of
  mistakes to match (its catalogue of wrong implementations lives with the tests, which are not
  shipped), and a list would go stale as checks change; grouping the checks' own words needs none.
- **Submissions that could not be graded**: those in ``submitted/`` without a complete autograded
  result, as ``grade-class`` decides what is left to grade (``class_grading.not_graded_because``);
  nbgrader removes the autograded folder of a submission it failed on. The reason is the error of
  reading the submitted notebook where it cannot be read (what ``grade-class`` reported), else the
  grader's own failure as ``TrustedVerdict`` recorded it (``nbgrader_plugin.ungraded_record``), else
  why its result is missing. These are not in the pass rates or the histogram.

Everything a student's code can influence (messages, student ids) is escaped before it is written.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from autograder.exercises import ExerciseState, Status, Verdict, checks_for

DEFAULT_TOP = 10
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?!\w)")
ANSWER_CELL = "the answer cell"  # the "check" of a mistake that is the answer cell's own error


def normalise(text: str) -> str:
    """One line of a message with its numbers replaced by ``#``, spaces collapsed, at most 300 characters: the
    key that groups one mistake's messages across students."""
    return _shortened(" ".join(_NUMBER.sub("#", text).split()))


def masked_where_they_differ(texts: list[str]) -> str:
    """Messages that ``normalise`` groups together, as one: each number kept where every message has it, ``#``
    where they differ."""
    collapsed = [" ".join(text.split()) for text in texts]
    pieces, numbers = _NUMBER.split(collapsed[0]), [_NUMBER.findall(text) for text in collapsed]
    shown = [pieces[0]]
    for index, piece in enumerate(pieces[1:]):
        values = {found[index] for found in numbers}
        shown += [values.pop() if len(values) == 1 else "#", piece]
    return _shortened("".join(shown))


def _shortened(text: str) -> str:
    return text if len(text) <= 300 else text[:299] + "…"


@dataclass
class ExerciseRow:
    notebook: str
    grade_id: str
    title: str
    points: float
    passed: int = 0
    failing: int = 0
    not_started: int = 0  # failed with every failing check meeting the stub

    @property
    def n(self) -> int:
        return self.passed + self.failing + self.not_started

    @property
    def rate(self) -> float | None:
        return self.passed / self.n if self.n else None


@dataclass
class Mistake:
    exercise: str  # the exercise's title
    check: str  # the failed check's description, or ANSWER_CELL
    key: str  # the first line of its message, normalised: what groups it
    said: dict[str, str] = field(default_factory=dict)  # student -> the first line of their message

    @property
    def students(self) -> set[str]:
        return set(self.said)

    @property
    def count(self) -> int:
        return len(self.said)

    @property
    def text(self) -> str:
        """What the check said, with the numbers that differ among these students as ``#``."""
        return masked_where_they_differ([self.said[student] for student in sorted(self.said)])


@dataclass
class ClassReport:
    assignment: str
    max_score: float
    scores: dict[str, float]  # graded student -> total score
    exercises: list[ExerciseRow]
    mistakes: list[Mistake]  # every one, most frequent first
    ungraded: dict[str, str]  # student -> why there is no result
    top: int = DEFAULT_TOP
    outcomes: dict[str, dict[str, str]] = field(default_factory=dict)  # graded student -> exercise title -> how it went

    def histogram(self) -> list[tuple[float, float, int]]:
        """(low, high, submissions) per bin: one bin per point up to 20 points, else 10 equal bins.

        A score falls in the bin with ``low <= score < high``; the last bin also holds the maximum.
        """
        top = self.max_score or max(self.scores.values(), default=0.0) or 1.0
        width, bins = (1.0, math.floor(top) + 1) if top <= 20 else (top / 10, 10)  # up to 20: the maximum its own bin
        counts = [0] * bins
        for score in self.scores.values():
            counts[min(bins - 1, max(0, int(score // width)))] += 1
        return [(i * width, (i + 1) * width, count) for i, count in enumerate(counts)]

    def table(self) -> str:
        """The plain-text summary: one row per exercise, then the class's score and who is missing."""
        rows = [("exercise", "pass rate", "passed", "failing", "not started", "n")]
        for row in self.exercises:
            rate = "-" if row.rate is None else f"{row.rate:.0%}"
            rows.append((row.title, rate, str(row.passed), str(row.failing), str(row.not_started), str(row.n)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True))
            )
            for r in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        if self.scores:
            values = list(self.scores.values())
            lines.append(
                f"\n{len(values)} graded: mean {statistics.fmean(values):.1f}, "
                f"median {statistics.median(values):g} of {self.max_score:g} points"
            )
        else:
            lines.append("\nno graded submissions")
        if self.ungraded:
            lines.append(
                f"{len(self.ungraded)} could not be graded: "
                + ", ".join(f"{student} ({why})" for student, why in self.ungraded.items())
            )
        return "\n".join(lines)

    def html(self) -> str:
        return _html(self)


# --------------------------------------------------------------------------- reading the class


NO_VERDICT = "no verdict of the grader's in its test cell (a score given by hand, or graded before verdicts were kept)"
MISTAKES = (Status.FAILED, Status.RULE)  # not implemented and not run are no mistakes


def failures(verdict: Verdict | None) -> list[tuple[str, str]] | None:
    """(what failed, the first line of why) for each mistake a failed exercise's verdict holds, the answer cell's
    error first (as ``ANSWER_CELL``); [] when it holds none (only stubs met, or checks not run); None when there
    is no verdict to read."""
    if verdict is None:
        return None
    if verdict.passed:
        return [("-", "the grader passed it: its score was changed by hand")]
    found = [(ANSWER_CELL, verdict.note.splitlines()[0])] if verdict.note else []
    found += [
        (check.description, (check.message.splitlines() or [""])[0])
        for check in verdict.checks
        if check.status in MISTAKES
    ]
    return found


def _verdicts(path: Path) -> dict[str, Verdict]:
    """Test cell id -> the verdict ``TrustedVerdict`` kept in it, for each graded test cell of an autograded
    notebook ({} when there is no readable notebook)."""
    import nbformat

    from autograder.nbgrader_plugin import verdict_of
    from coursetools import notebook_vocabulary

    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError, nbformat.reader.NotJSONError):  # not submitted, so not graded: no verdicts
        return {}
    return {
        notebook_vocabulary.grade_id(cell): verdict
        for cell in nb.cells
        if notebook_vocabulary.grade_id(cell) and (verdict := verdict_of(cell)) is not None
    }


def _unreadable(folder: Path) -> str | None:
    """The error of reading a submitted notebook, as nbgrader met it (None: every one reads)."""
    import nbformat

    for path in sorted(folder.glob("*.ipynb")):
        try:
            nbformat.read(path, as_version=4)
        except Exception as error:  # noqa: BLE001 - whatever it is, it is why this submission was not graded
            said = str(error).strip().splitlines()
            return f"{type(error).__name__}: {said[0] if said else ''}".strip()
    return None


def _grader_failed(coursedir, assignment: str, student: str) -> str | None:
    """Why the grader could not grade this submission, as ``TrustedVerdict`` recorded it (None: no record)."""
    import json

    from autograder.nbgrader_plugin import ungraded_record

    try:
        return str(json.loads(ungraded_record(Path(coursedir.root), assignment, student).read_text())["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def build_report(coursedir, gradebook, assignment: str, top: int = DEFAULT_TOP) -> ClassReport:
    """Read the class of ``assignment`` from the gradebook and the autograded notebooks."""
    from autograder.class_grading import not_graded_because, submitted_students

    record = gradebook.find_assignment(assignment)  # MissingEntry: never released
    exercises: dict[tuple[str, str], ExerciseRow] = {}
    for notebook in record.notebooks:
        titles = {}
        try:
            titles = {e.test_cell_id: e.title for e in checks_for(notebook.name).exercises}
        except LookupError:
            pass
        for cell in notebook.grade_cells:
            if cell.cell_type == "code":
                exercises[notebook.name, cell.name] = ExerciseRow(
                    notebook.name, cell.name, titles.get(cell.name, cell.name), cell.max_score
                )
    scores, ungraded, outcomes = {}, {}, {}
    mistakes: dict[tuple[str, str, str], Mistake] = {}
    for student in submitted_students(coursedir, assignment):
        why = not_graded_because(coursedir, gradebook, assignment, student)
        if why is not None:
            submitted = Path(coursedir.format_path(coursedir.submitted_directory, student, assignment))
            ungraded[student] = _unreadable(submitted) or _grader_failed(coursedir, assignment, student) or why
            continue
        submission = gradebook.find_submission(assignment, student)
        scores[student] = float(submission.score)
        outcome = outcomes.setdefault(student, {})
        autograded = Path(coursedir.format_path(coursedir.autograded_directory, student, assignment))
        for notebook in submission.notebooks:
            verdicts = _verdicts(autograded / f"{notebook.name}.ipynb")
            for grade in notebook.grades:
                row = exercises.get((notebook.name, grade.name))
                if row is None:
                    continue
                if grade.score >= grade.max_score:
                    row.passed += 1
                    outcome[row.title] = ExerciseState.PASSED
                    continue
                counted = failures(verdicts.get(grade.name))
                if counted == []:
                    row.not_started += 1
                    outcome[row.title] = ExerciseState.NOT_STARTED
                    continue
                row.failing += 1
                check, text = counted[0] if counted else ("-", NO_VERDICT)
                outcome[row.title] = f"failing: {check}"
                key = (row.title, check, normalise(text))
                mistakes.setdefault(key, Mistake(*key)).said[student] = text
    order = {title: index for index, title in enumerate(row.title for row in exercises.values())}
    ranked = sorted(mistakes.values(), key=lambda m: (-m.count, order.get(m.exercise, 0), m.check, m.key))
    return ClassReport(
        assignment, float(record.max_score), scores, list(exercises.values()), ranked, ungraded, top, outcomes
    )


# --------------------------------------------------------------------------- the page

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; padding: 0 1rem; color: #1a1a1a; }
table { border-collapse: collapse; margin: 1rem 0; }
th, td { border: 1px solid #bbb; padding: .3rem .6rem; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; }
caption { text-align: left; font-weight: bold; margin-bottom: .3rem; }
.bar { fill: #2b6cb0; }
.axis { stroke: #1a1a1a; }
svg text { font-size: 12px; fill: #1a1a1a; }
code { white-space: pre-wrap; }
"""


def _histogram_svg(report: ClassReport) -> str:
    bins = report.histogram()
    most = max((count for _, _, count in bins), default=0) or 1
    width, height, left, bottom, top = 640, 260, 40, 40, 20
    bar = (width - left - 10) / len(bins)
    said = "; ".join(f"{_bin_label(low, high, report)}: {count}" for low, high, count in bins)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-labelledby="histogram-title histogram-desc" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f'<title id="histogram-title">Histogram of the scores of {len(report.scores)} graded submissions</title>',
        f'<desc id="histogram-desc">Submissions per score (points): {escape(said)}</desc>',
        f'<line class="axis" x1="{left}" y1="{height - bottom}" x2="{width - 10}" y2="{height - bottom}"/>',
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}"/>',
        f'<text x="{left - 6}" y="{top + 4}" text-anchor="end">{most}</text>',
        f'<text x="{left - 6}" y="{height - bottom + 4}" text-anchor="end">0</text>',
    ]
    for index, (low, high, count) in enumerate(bins):
        tall = (height - bottom - top) * count / most
        x = left + index * bar
        label = escape(_bin_label(low, high, report))
        parts.append(
            f'<rect class="bar" x="{x + 2:.1f}" y="{height - bottom - tall:.1f}" width="{bar - 4:.1f}" '
            f'height="{tall:.1f}" data-low="{low:g}" data-count="{count}"><title>{label}: {count}</title></rect>'
        )
        parts.append(f'<text x="{x + bar / 2:.1f}" y="{height - bottom + 16}" text-anchor="middle">{label}</text>')
    parts.append(
        f'<text x="{left + (width - left) / 2:.0f}" y="{height - 6}" text-anchor="middle">score (points)</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts)


def _bin_label(low: float, high: float, report: ClassReport) -> str:
    return f"{low:g}" if high - low == 1.0 else f"{low:g}–{min(high, report.max_score):g}"


def _percent(rate: float | None) -> str:
    return "–" if rate is None else f"{rate:.0%}"


def _html(report: ClassReport) -> str:
    name = escape(report.assignment)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Class report: {name}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>Class report: {name}</h1>",
        f"<p>{len(report.scores)} submissions graded, {len(report.ungraded)} could not be graded; "
        f"{report.max_score:g} points in all.</p>",
    ]

    out += _exercises_table(report)
    out += _mistakes_table(report)
    out += _students_table(report)
    out += _scores_section(report)
    out += _ungraded_table(report)
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


def _exercises_table(report: ClassReport) -> list[str]:
    """Each exercise's pass rate, with how many passed, failed and left it untouched."""
    out = [
        "<h2>Exercises</h2>",
        "<table>",
        "<caption>Pass rate of each exercise among the graded submissions</caption>",
        "<thead><tr>"
        + "".join(
            f'<th scope="col"{cls}>{head}</th>'
            for head, cls in (
                ("Exercise", ""),
                ("Points", ' class="num"'),
                ("Pass rate", ' class="num"'),
                ("Passed", ' class="num"'),
                ("Failing", ' class="num"'),
                ("Not started", ' class="num"'),
                ("Graded", ' class="num"'),
            )
        )
        + "</tr></thead>",
        "<tbody>",
    ]
    for row in report.exercises:
        out.append(
            f'<tr><th scope="row">{escape(row.title)}</th><td class="num">{row.points:g}</td>'
            f'<td class="num">{_percent(row.rate)}</td><td class="num">{row.passed}</td>'
            f'<td class="num">{row.failing}</td><td class="num">{row.not_started}</td><td class="num">{row.n}</td></tr>'
        )
    out += ["</tbody>", "</table>"]

    return out


def _mistakes_table(report: ClassReport) -> list[str]:
    """The most frequent mistakes: the check, what it said, and who made each."""
    out = []
    shown = report.mistakes[: report.top]
    out.append("<h2>Mistakes the class made most</h2>")
    if shown:
        out += [
            "<p>Each failed exercise of each student counts once: its answer cell's error if it raised one, "
            "else its first failed check, grouped by the check and the first line of its message (a number "
            "that differs among the students shown as #). An untouched exercise is not counted.</p>",
            "<table>",
            f"<caption>The {len(shown)} most frequent of {len(report.mistakes)} distinct mistakes</caption>",
            '<thead><tr><th scope="col" class="num">Students</th><th scope="col">Exercise</th>'
            '<th scope="col">Check</th><th scope="col">What it said</th><th scope="col">Who</th></tr></thead>',
            "<tbody>",
        ]
        for mistake in shown:
            out.append(
                f'<tr><td class="num">{mistake.count}</td><td>{escape(mistake.exercise)}</td>'
                f"<td>{escape(mistake.check)}</td><td><code>{escape(mistake.text)}</code></td>"
                f"<td>{escape(', '.join(sorted(mistake.students)))}</td></tr>"
            )
        out += ["</tbody>", "</table>"]
    else:
        out.append("<p>No failed checks among the graded submissions.</p>")

    return out


def _scores_section(report: ClassReport) -> list[str]:
    """The histogram of the total scores, and its numbers in a table."""
    out = [
        "<h2>Scores</h2>",
        f"<figure>{_histogram_svg(report)}",
        "<figcaption>Number of graded submissions per total score.</figcaption></figure>",
        "<table>",
        "<caption>The histogram's numbers</caption>",
        '<thead><tr><th scope="col">Score (points)</th><th scope="col" class="num">Submissions</th></tr></thead>',
        "<tbody>",
    ]
    for low, high, count in report.histogram():
        out.append(f'<tr><th scope="row">{escape(_bin_label(low, high, report))}</th><td class="num">{count}</td></tr>')
    out += ["</tbody>", "</table>"]

    return out


def _ungraded_table(report: ClassReport) -> list[str]:
    """The submissions that could not be graded, and why."""
    out = []
    out.append("<h2>Submissions that could not be graded</h2>")
    if report.ungraded:
        out += [
            "<table>",
            "<caption>In submitted/ without a complete autograded result</caption>",
            '<thead><tr><th scope="col">Student</th><th scope="col">Why</th></tr></thead>',
            "<tbody>",
        ]
        for student, why in report.ungraded.items():
            out.append(f'<tr><th scope="row">{escape(student)}</th><td><code>{escape(why)}</code></td></tr>')
        out += ["</tbody>", "</table>"]
    else:
        out.append("<p>None: every submission was graded.</p>")
    return out


def _students_table(report: ClassReport) -> list[str]:
    """Each graded student: their score, and how each exercise went (passed, not started, or the check it failed)."""
    titles = [row.title for row in report.exercises]
    out = [
        "<h2>Students</h2>",
        "<table>",
        "<caption>Each graded student's score and exercises</caption>",
        "<thead><tr>"
        + '<th scope="col">Student</th><th scope="col" class="num">Score</th>'
        + "".join(f'<th scope="col">{escape(title)}</th>' for title in titles)
        + "</tr></thead>",
        "<tbody>",
    ]
    for student in sorted(report.scores):
        went = report.outcomes.get(student, {})
        out.append(
            f'<tr><th scope="row">{escape(student)}</th><td class="num">{report.scores[student]:g}</td>'
            + "".join(f"<td>{escape(went.get(title, '-'))}</td>" for title in titles)
            + "</tr>"
        )
    return [*out, "</tbody>", "</table>"]


# --------------------------------------------------------------------------- the command


def read_class(assignment: str, options: list[str] = (), top: int = DEFAULT_TOP) -> tuple[ClassReport, Path]:
    """The report of ``assignment``, read in the course root (the current folder), and the course root.

    The course is configured as ``nbgrader autograde`` configures it (``nbgrader_config.py``, and
    ``--Class.trait=value`` options). FileNotFoundError: no gradebook; MissingEntry: no such assignment.
    """
    from nbgrader.api import Gradebook
    from nbgrader.apps import AutogradeApp

    from autograder.class_grading import configured_app

    coursedir = configured_app(AutogradeApp, [assignment, "--log-level=WARN", *options]).coursedir
    if coursedir.db_url.startswith("sqlite:///"):  # Gradebook would create an empty one
        database = Path(coursedir.root) / coursedir.db_url.removeprefix("sqlite:///")
        if not database.is_file():
            raise FileNotFoundError(f"no gradebook at {database}")
    with Gradebook(coursedir.db_url, coursedir.course_id) as gradebook:
        return build_report(coursedir, gradebook, assignment, top), Path(coursedir.root)


def main(assignment: str, output: str | None, top: int, options: list[str]) -> int:
    """The command line: the table on stdout, the page written; exit 2 on bad input."""
    from nbgrader.api import MissingEntry

    if not Path("nbgrader_config.py").is_file():
        print("error: run report from the course root, the folder with nbgrader_config.py", file=sys.stderr)
        return 2
    try:
        report, root = read_class(assignment, options, top)
    except (FileNotFoundError, MissingEntry) as error:
        said = f"{error}" if isinstance(error, FileNotFoundError) else f"no assignment {assignment!r} in the gradebook"
        print(f"error: {said}: autograde it first (python -m autograder grade-class {assignment})", file=sys.stderr)
        return 2
    path = Path(output) if output else root / "reports" / f"{assignment}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.html(), encoding="utf-8")
    print(report.table())
    shown = report.mistakes[:top]
    if shown:
        print("\nmistakes made most (students: exercise: check: what it said [who]):")
        for mistake in shown:
            print(
                f"  {mistake.count}: {mistake.exercise}: {mistake.check}: {mistake.text} "
                f"[{', '.join(sorted(mistake.students))}]"
            )
    print(f"\nreport: {path}")
    return 0
