"""nbgrader integration: student code runs only in the sandboxed worker, never in nbgrader's kernel.

Plain nbgrader runs the student's cells and then the test cells in one kernel, with the
instructor's permissions, and scores a test cell by whether its output shows an error;
code in that kernel can fake any output, or reach the gradebook. Here ``TrustedVerdict``
replaces nbgrader's ``Execute``: it grades the notebook with ``autograder.grading``
(student cells in a sandboxed worker, checks in this process), writes the outputs the
worker recorded into the student's cells (for the feedback), and writes the verdict into
every test cell, so ``SaveAutoGrades`` records it.

Without a working sandbox it refuses to grade, unless the instructor sets
``c.TrustedVerdict.allow_unsandboxed = True``.

A submission it cannot grade (no sandbox, a worker that fails before any student code runs, a limit
that cannot be set) gets no score: the exception goes up to nbgrader, whose autograde of that
submission fails with the reason, and the submission nbgrader had already entered in the gradebook
(with empty grades, which its export would count as 0) is taken out again (``forget_ungraded``).
"""

from __future__ import annotations

import csv
import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path

from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbconvert.preprocessors import Preprocessor
from nbformat.notebooknode import NotebookNode, from_dict
from nbgrader.coursedir import CourseDirectory
from nbgrader.plugins import CsvExportPlugin
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor, OverwriteCells
from traitlets import Bool, Float, Int, List, Unicode

import coursetools
from autograder.errors import GradingError
from autograder.exercises import ExerciseState, Verdict
from autograder.phases import Phase
from autograder.sandbox import (
    DEFAULT_FILE_SIZE,
    DEFAULT_MEMORY,
    DEFAULT_PROCESSES,
    DEFAULT_TIMEOUT,
    INSTALL_HINT,
    Limits,
    SandboxUnavailable,
    unavailable_reason,
)
from coursetools.notebook_vocabulary import grade_id, is_test_cell, nbgrader_resources

VERDICT_KEY = "autograder_verdict"  # a graded test cell's metadata: its verdict as data (``ExerciseResult.to_json``)


def verdict_of(cell) -> Verdict | None:
    """The verdict ``TrustedVerdict`` kept in a test cell's metadata (None: the cell was not graded by it, or what it
    holds is no verdict)."""
    kept = cell.get("metadata", {}).get(VERDICT_KEY)
    try:
        return Verdict.from_json(kept)
    except (AttributeError, KeyError, TypeError, ValueError):  # absent (None), or not the grader's data
        return None


def _unknown_test_verdict(test: str) -> dict:
    return {
        "id": test,
        "passed": False,
        "state": ExerciseState.FAILING,
        "note": f"no checks are registered for test cell {test!r}",
        "checks": [],
    }


def _verdict_outputs(result) -> list[NotebookNode]:
    text = f"{result.exercise.title}: {result.points}/{result.exercise.points} points\n"
    if result.passed:
        return [NotebookNode(output_type="stream", name="stdout", text=text + result.message + "\n")]
    return [
        NotebookNode(
            output_type="error",
            ename="ChecksFailed",
            evalue=result.message.splitlines()[0] if result.message else "failed",
            traceback=[text + result.message],
        )
    ]


class WrongGradebook(GradingError):
    """Grades would go to a gradebook other than the one the course's configuration names (``gradebook_refusal``)."""


def gradebook_refusal(db_url: str, config) -> str | None:
    """Why grades must not be written to ``db_url`` (None: they may be).

    formgrader fixes its gradebook when the JupyterLab server starts and reads the course's settings again on each
    request: a server started before the course folder was in place kept a gradebook in the home folder, a second
    one, which knew the students it collected and no assignment ("No assignment with ID ... exists"). The
    gradebook an nbgrader command writes must be the one its configuration names as it runs.
    """
    section = config["CourseDirectory"] if "CourseDirectory" in config else {}
    if "root" not in section and "db_url" not in section:  # no course named: nothing to hold it to
        return None
    named = CourseDirectory(config=config).db_url
    if db_url == named:
        return None
    return (
        f"refusing to write grades to {db_url}: the course's configuration names the gradebook {named}. This "
        "process read its settings before the course folder was in place (a JupyterLab server started before the "
        "course was cloned): restart it (on the hub: File > Hub Control Panel > Stop My Server, then Start My "
        "Server), then collect or grade again"
    )


def private_paths(coursedir: CourseDirectory) -> list[Path]:
    """What student code must not see of the course: instructor sources, submissions, grades, logs."""
    root = Path(coursedir.root)
    paths = [
        root / getattr(coursedir, f"{step}_directory")
        for step in ("source", "submitted", "autograded", "feedback", "solution", "source_with_tests")
    ]
    # grades.csv: where `nbgrader export` and `grade-class` write the whole class's grades by default;
    # reports/: where `report` writes the class's pass rates, mistakes and scores
    paths += [root / ".nbgrader.log", root / "nbgrader_config.py.bak", root / "grades.csv", root / "reports"]
    if coursedir.db_url.startswith("sqlite:///"):  # an absolute path, or one relative to the course
        paths.append(root / coursedir.db_url.removeprefix("sqlite:///"))
    return paths


def quiet_gradebook_warnings() -> None:
    """Ignore the SQLAlchemy warnings that nbgrader's gradebook gives for every new submission, and only those.

    nbgrader 0.9.6's ``Gradebook.add_submission`` links the new submission to its assignment and
    student before adding it to the session, then reads the assignment's notebooks; SQLAlchemy 2's
    autoflush then warns "Object of type <SubmittedAssignment> not in session, add operation along
    'Assignment.submissions' will not proceed" (and the same for the notebooks). The method adds and
    commits the whole submission right after, so the gradebook is right (the end-to-end tests read
    every grade back). The fix belongs in nbgrader; until then this message from ``nbgrader.api``
    is ignored, and every other warning still shows.
    """
    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings(
        "ignore",
        message=r"Object of type <\w+> not in session, add operation along",
        category=SAWarning,
        module=r"nbgrader\.api",
    )


class FeedbackClearHiddenTests(ClearHiddenTests):
    """nbgrader's ``ClearHiddenTests``, for the HTML feedback.

    The HTML exporter sets ``NbConvertBase.display_data_priority`` for every preprocessor it runs, and
    nbgrader's preprocessors declare that trait again without ``config=True``, so traitlets warned
    "Config option `display_data_priority` not recognized by `ClearHiddenTests`" on every
    ``generate_feedback``. Declared configurable here, it takes the exporter's value (and ignores it).
    """

    display_data_priority = List(Unicode(), help="Unused; the HTML exporter sets it for every preprocessor.").tag(
        config=True
    )


class FeedbackOutputsWrap(Preprocessor):
    """The feedback's outputs fit the page's width (text wraps, figures shrink): each exercise's reason is a ``<pre>`` that nbconvert's
    classic template never wraps, so at a 1000-px window in JupyterLab's HTML viewer a reason ran 1267 px wide
    in an 846-px frame, and students scrolled sideways to learn why they lost points. Run after
    ``CSSHTMLHeaderPreprocessor``, which sets the page's inlined styles (the feedback template writes them into
    its ``<head>``)."""

    enabled = Bool(True, help="nbconvert's preprocessors are off unless enabled; this one is on.").tag(config=True)
    css = (
        "/* the course's feedback: outputs wrap, long words included (autograder/nbgrader_plugin.py) */\n"
        "div.output_area pre { white-space: pre-wrap; overflow-wrap: anywhere; }\n"
        "div.output_area img { max-width: 100%; height: auto; }\n"
    )

    def preprocess(self, nb, resources):
        resources.setdefault("inlining", {}).setdefault("css", []).append(self.css)
        return nb, resources


class FeedbackExporter(HTMLExporter):
    """nbconvert's HTML exporter for ``generate_feedback``, without its second reading of a page that needs none.

    ``HTMLExporter`` renders the page and then parses all of it again with BeautifulSoup, to give alternative text
    to each ``<img>`` that has none and ``tabindex`` to the cells of JupyterLab's templates. nbgrader's feedback
    template is the classic one, which has no such cells, and the grader records every figure with its
    alternative text (``autograder.outputs``), so on the course's feedback that pass changed only how the HTML was
    spelled, yet took about 1 s of each page's 1.6 s (the highlighted code is some 7,000 tags a page;
    benchmarks/suite_time.md). A page with an ``<img>`` that lacks alternative text (an HTML output of the
    student's own, say) still takes nbconvert's whole path. ``tests/test_nbgrader_e2e.py`` checks that the two
    give the same document.
    """

    def from_notebook_node(self, nb, resources=None, **kw):
        html, rendered = self._render(nb, resources, **kw)
        if IMAGE_WITHOUT_ALT.search(html) or LAB_CELLS.search(html):
            return super().from_notebook_node(nb, resources, **kw)
        return html, rendered

    def _render(self, nb, resources, **kw):
        """The template's page, with the filters ``HTMLExporter.from_notebook_node`` registers first (nbconvert
        7.17): code highlighted in the notebook's language, and widget outputs dropped where none can show."""
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name", None))
        highlight = self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))
        resources = self._init_resources(resources)
        data_types = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self, resources=resources)
        self.register_filter("highlight_code", highlight)
        self.register_filter("filter_data_type", data_types)
        return TemplateExporter.from_notebook_node(self, nb, resources, **kw)


# What HTMLExporter's second pass would change: an image without alternative text, or a cell of JupyterLab's
# templates (the two selectors it gives tabindex).
IMAGE_WITHOUT_ALT = re.compile(r"<img(?![^>]*\balt\s*=)[^>]*>", re.IGNORECASE)
LAB_CELLS = re.compile(r"jp-Cell-inputWrapper|jp-OutputArea-output")


# The feedback's maths: nbgrader's feedback template loads MathJax from a CDN, so offline its formulas stayed raw
# ``$\gamma$``. nbgrader_config.py puts TEMPLATES before nbgrader's own templates: its feedback/mathjax.html.j2
# replaces that macro and inlines MathJax from coursetools/static (see its SOURCES.md) through ``course_script``.
TEMPLATES = Path(__file__).resolve().parent / "templates"
STATIC = Path(coursetools.__file__).resolve().parent / "static"


def feedback_template_dirs() -> list[str]:
    """``HTMLExporter.extra_template_basedirs`` for ``generate_feedback``: the course's, then nbgrader's (which
    nbgrader sets only where the configuration does not)."""
    import nbgrader

    return [str(TEMPLATES), str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")]


def course_script(name: str) -> str:
    """The Jinja filter ``course_script``: the browser library ``coursetools/static/NAME`` as an inline script
    (nbconvert's templates do not escape what filters return)."""
    source = (STATIC / Path(name).name).read_text(encoding="utf-8")
    return "<script>" + source.replace("</script", "<\\/script") + "</script>"


class RestoreCells(OverwriteCells):
    """nbgrader's ``OverwriteCells``, and every cell it puts back gets a cell id.

    With ``add_missing_cells``, a test cell that a student deleted comes back from the gradebook
    without the id that nbformat 4.5 requires of every cell, and nbformat warned
    "MissingIDFieldWarning: Cell is missing an id field" as the notebook was written. The restored
    cell takes its grade id (made unique in the notebook).
    """

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        if (nb.nbformat, nb.nbformat_minor) < (4, 5):  # no cell ids before nbformat 4.5
            return nb, resources
        taken = {cell.get("id") for cell in nb.cells}
        for cell in nb.cells:
            if not cell.get("id"):
                name = grade_id(cell) or "restored"
                base = re.sub(r"[^A-Za-z0-9_-]", "-", name)[:56]  # an id: 1 to 64 of these characters
                cell.id, copies = base, 1
                while cell.id in taken:
                    copies += 1
                    cell.id = f"{base}-{copies}"
                taken.add(cell.id)
        return nb, resources


# Who is told each phase of a grading as it begins (``autograder.phases``): ``grade-class`` sets it in its workers, to
# show what each submission being graded is doing (assignment, student, phase). A display only: never a grade.
phase_listener: Callable[[str, str, Phase], None] | None = None

# Why each submission this process could not grade was not graded, by (assignment, student): ``grade-class``
# runs nbgrader in its own worker processes and reads this after each autograde, instead of parsing the log.
ungraded_reasons: dict[tuple[str, str], str] = {}
UNGRADED = Path("reports") / "ungraded"  # in the course root (private, like reports/): why, for ``report``


def ungraded_record(root: Path, assignment: str, student: str) -> Path:
    """Where the reason a submission could not be graded is kept until it is graded: a JSON file read by
    ``class_report``, which runs later, in another process."""
    return Path(root) / UNGRADED / assignment / f"{student}.json"


def forget_ungraded(db_url: str, course_id: str, assignment: str, student: str) -> str:
    """Take the submission out of the gradebook, unless a person has graded or commented on it; say what was done.

    nbgrader enters a submission (its grades empty) before it grades it, and leaves it there when grading
    fails: its export then shows a 0. Grades and comments given by hand in formgrader are never thrown
    away: such a submission stays, with the scores it had.
    """
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course_id) as gradebook:
        try:
            submission = gradebook.find_submission(assignment, student)
        except MissingEntry:
            return "the gradebook holds no submission for it"
        notebooks = submission.notebooks
        by_hand = any(grade.manual_score is not None for nb in notebooks for grade in nb.grades) or any(
            comment.manual_comment for nb in notebooks for comment in nb.comments
        )
        if by_hand:
            return "the gradebook keeps its earlier scores: a person graded or commented on it"
        gradebook.remove_submission(assignment, student)
        return "it was taken out of the gradebook, so no score stands for it"


class CsvExportKeepsUngradedEmpty(CsvExportPlugin):
    """nbgrader's CSV export, where a submission that could not be graded has empty scores instead of 0.

    nbgrader writes 0 for every student of the gradebook without a graded submission, which cannot be told
    from a real 0. A student whose submission sits in ``submitted/`` without a submission in the gradebook
    (autograding it failed, so ``forget_ungraded`` took it out, or it has not run yet) gets empty
    ``raw_score``, ``late_submission_penalty`` and ``score``; one who submitted nothing keeps nbgrader's 0.
    """

    def export(self, gradebook) -> None:
        super().export(gradebook)
        path = Path(self.to or "grades.csv")
        coursedir = CourseDirectory(config=self.config)
        with path.open(newline="") as file:
            rows = list(csv.DictReader(file))
        if not rows:
            return
        for row in rows:
            submitted = Path(coursedir.format_path(coursedir.submitted_directory, row["student_id"], row["assignment"]))
            if row["timestamp"] == "" and submitted.is_dir() and not _in_gradebook(gradebook, row):
                row.update(raw_score="", late_submission_penalty="", score="")
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)


def _in_gradebook(gradebook, row: dict) -> bool:
    from nbgrader.api import MissingEntry

    try:
        gradebook.find_submission(row["assignment"], row["student_id"])
    except MissingEntry:
        return False
    return True


class TrustedVerdict(NbGraderPreprocessor):
    """Run the notebook in the sandbox, record its outputs, and write the verdict into the test cells."""

    timeout = Float(DEFAULT_TIMEOUT, help="Seconds per cell and per call into student code.").tag(config=True)
    memory_limit = Unicode(DEFAULT_MEMORY, help="Memory student code may use (address space), e.g. 3G or 512M.").tag(
        config=True
    )
    max_processes = Int(DEFAULT_PROCESSES, help="Processes and threads student code may run at once.").tag(config=True)
    max_file_size = Unicode(DEFAULT_FILE_SIZE, help="Largest file student code may write.").tag(config=True)
    allow_unsandboxed = Bool(
        False, help="Grade even where bubblewrap cannot run: student code then has your permissions."
    ).tag(config=True)

    def refusal(self, reason: str | None) -> str | None:
        """Why this grader refuses to grade where the sandbox cannot run for ``reason`` (None: it can), or None."""
        if reason and not self.allow_unsandboxed:
            return (
                f"refusing to run student code unsandboxed: {reason}; {INSTALL_HINT}, "
                "or set c.TrustedVerdict.allow_unsandboxed = True in nbgrader_config.py"
            )
        return None

    def preprocess(self, nb, resources):
        try:
            return self._grade(nb, resources)
        except BaseException as error:
            self._not_graded(resources, error)
            raise

    def _not_graded(self, resources, error: BaseException) -> None:
        """No score for a submission that could not be graded: out of the gradebook, and say why."""
        about = nbgrader_resources(resources)
        assignment, student = about.get("assignment"), about.get("student")
        if assignment is None or student is None:  # not run by nbgrader's autograde
            return
        if isinstance(error, WrongGradebook):  # no gradebook is this grader's to change
            self.log.error("%s of %s was not graded: %s", assignment, student, error)
            return
        coursedir = CourseDirectory(config=self.config)
        if isinstance(error, GradingError | SandboxUnavailable):  # the set-up's failure, not the student's
            ungraded_reasons[(assignment, student)] = str(error)
            record = ungraded_record(Path(coursedir.root), assignment, student)
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps({"reason": str(error)}))
        done = forget_ungraded(about.get("db_url") or coursedir.db_url, coursedir.course_id, assignment, student)
        self.log.error("%s of %s was not graded (%s): %s", assignment, student, error, done)

    def _grade(self, nb, resources):
        db_url = nbgrader_resources(resources).get("db_url")
        if db_url and (refusal := gradebook_refusal(db_url, self.config)):
            raise WrongGradebook(refusal)
        reason = unavailable_reason()  # probes bubblewrap: once per notebook
        if refusal := self.refusal(reason):
            raise SandboxUnavailable(refusal)
        if reason:
            self.log.warning("Grading WITHOUT a sandbox (%s): student code runs with your permissions", reason)
        # Imported here, not at the top: every nbgrader command loads nbgrader_config.py, hence this module, and
        # only autograde grades; the others (release, feedback, export, the formgrader) would import torch for
        # nothing, 1.1 s each (benchmarks/suite_time.md).
        from autograder.grading import grade

        coursedir = CourseDirectory(config=self.config)
        about = nbgrader_resources(resources)
        listener = phase_listener
        report = grade(
            nb,
            Path(resources["metadata"].get("path") or "."),
            timeout=self.timeout,
            limits=Limits.from_settings(self.memory_limit, self.max_processes, self.max_file_size),
            sandboxed=reason is None,
            course_root=Path(coursedir.root),
            private=private_paths(coursedir),
            record=True,
            on_phase=(lambda phase: listener(about.get("assignment"), about.get("student"), phase))
            if listener
            else None,
        )
        by_test_cell = {r.exercise.test_cell_id: r for r in report.exercises}
        count = 0
        for index, cell in enumerate(nb.cells):
            cell.metadata.pop(VERDICT_KEY, None)  # only the grader writes a verdict, on the test cells below
            if cell.cell_type != "code":
                continue
            count += 1  # numbered in order, as if run top to bottom
            cell.execution_count = count
            if not is_test_cell(cell):
                outcome = report.cells.get(index)
                cell.outputs = [from_dict(output) for output in (outcome.outputs if outcome else [])]
                for output in cell.outputs:
                    if output.output_type == "execute_result":
                        output.execution_count = count
                continue
            test = grade_id(cell) or ""
            result = by_test_cell.get(test)
            if result is None:  # a graded cell with no checks behind it never passes
                cell.metadata[VERDICT_KEY] = _unknown_test_verdict(test)
                cell.outputs = [
                    NotebookNode(
                        output_type="error",
                        ename="UnknownTest",
                        evalue=test,
                        traceback=[f"no checks are registered for test cell {test!r}"],
                    )
                ]
            else:
                cell.metadata[VERDICT_KEY] = result.to_json()
                cell.outputs = _verdict_outputs(result)
        self.log.info("Trusted verdict for %s: %s/%s", report.notebook, report.score, report.max_score)
        if about.get("assignment") and about.get("student"):  # graded now: an old reason no longer holds
            ungraded_record(coursedir.root, about["assignment"], about["student"]).unlink(missing_ok=True)
        return nb, resources
