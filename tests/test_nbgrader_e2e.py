"""A whole class through real nbgrader, for every notebook: release, submissions, autograde, feedback, export.

Every notebook's class has a full student, who must earn every point. The first notebook of each course
folder (``GRADED_TOGETHER``) adds an unfinished student, who leaves the last exercise as released (its stub)
and answers every other one with a plausible mistake, the last of which also cheats (patches torch's
comparisons, fakes ``autograder.check``); it must earn nothing, and its feedback must say "not implemented
yet" for the stub and show no line of the solutions or the hidden tests that it did not write itself. Those
ways of failing run through the same grader whatever the notebook, so one grading per folder walks them
through nbgrader; every notebook's stubs and catalogued mistakes, with the messages its test cells show, are
graded in-process (tests/test_checks.py and tests/test_wrong_implementations.py). Notebook 01's class adds
the ways of breaking the worker; notebook 04's adds every attack on the grader (``attacks.py``) and three that
only make sense inside nbgrader: copying the instructor's solution, copying a classmate's submission, editing the
gradebook. Attackers each hold a wrong (or failing) answer to ONE exercise: the trick must not earn it, and their
right answers must still earn theirs.

Each notebook's tests are one test class (``TestClassNN``). The classes are graded in four course folders
(``GRADED_TOGETHER``), each by one run of nbgrader's commands over all its assignments, and pytest-xdist
(``--dist loadscope``, with tests/conftest.py's scopes) grades the folders in parallel, each once, on one worker.
"""

from __future__ import annotations

import ast
import copy
import csv
import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import attacks
import nbformat
import pytest
from browser_driver import WIDEST, offline_page, requires_browser
from leaks import html_text, leaked, normalise, secret_lines
from notebooks import (
    NOTEBOOKS,
    ROOT,
    answer_source,
    grade_id,
    read,
    release_path,
    require_sandbox,
    solution_path,
)
from released import release_into
from wrong import wrong_versions

from autograder.exercises import Status, checks_for
from autograder.nbgrader_plugin import VERDICT_KEY, course_script, verdict_of
from coursetools.notebook_vocabulary import answer_id, is_graded_cell, is_test_cell, is_test_id, test_id

TIMEOUT = 10  # seconds per cell and per call in the grading worker
# Notebook 01's class holds the students who hang (each costs the timeout); its cells and checks take well under
# a second each.
HANGING_CLASS_TIMEOUT = 5


@dataclass
class Student:
    answers: dict[str, str] | None  # exercise -> answer cell (others: the solution); None: the untouched release
    zero: set[str]  # exercises that must score 0
    edit: str | None = None  # "delete" or "edit" the test cells
    says: dict[str, tuple[str, ...]] = field(default_factory=dict)  # exercise -> one of these in the feedback
    files: dict[str, str] = field(default_factory=dict)  # more files submitted beside the notebook: path -> text
    forges_verdicts: bool = False  # writes a passing verdict into every cell's metadata, where the grader keeps its own
    unstarted: frozenset[str] = frozenset()  # exercises whose answer cell stays as released (its stub)

    def stubbed(self, notebook: str) -> set[str]:
        """The exercises this student's notebook holds as released."""
        return set(points(notebook)) if self.answers is None else set(self.unstarted)


def points(notebook: str) -> dict[str, int]:
    return {e.id: e.points for e in checks_for(notebook).exercises}


@functools.cache  # the classes' students are built at collection too: read each solution once, not per answer
def _solution(notebook: str):
    return read(solution_path(notebook))


@functools.cache
def right(notebook: str, exercise: str) -> str:
    return answer_source(_solution(notebook), exercise)


@functools.cache  # each wrong version asks for every other answer's names: parse each answer once
def _defines(code: str) -> frozenset[str]:
    return frozenset(node.name for node in ast.parse(code).body if isinstance(node, ast.FunctionDef | ast.ClassDef))


def wrong(notebook: str, exercise: str, which: int = 0) -> str:
    """A plausible mistake (tests/wrong; the ``which``-th of this exercise's) in its answer cell, and only there.

    Some wrong versions carry their own copies of earlier answers (attention_weights
    with its softmax); in a notebook those copies would replace the student's, so they
    are left out here.
    """
    code = [w.code for w in wrong_versions(notebook) if w.exercise == exercise][which]
    others = set().union(*(_defines(right(notebook, e)) for e in points(notebook) if e != exercise))
    tree = ast.parse(code)
    tree.body = [node for node in tree.body if getattr(node, "name", None) not in others]
    return ast.unparse(tree)


FAKE_AUTOGRADER = """
import sys, types
fake = types.ModuleType("autograder")
fake.check = lambda *args, **kwargs: print("All visible checks passed.")
sys.modules["autograder"] = fake
"""
PATCH_TORCH = """
torch.allclose = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
torch.equal = lambda *a, **k: True
"""


def _answer_cell(notebook: str, exercise: str) -> int:
    """The 0-based index of ``exercise``'s answer cell in the release."""
    cells = read(release_path(notebook)).cells
    (index,) = [i for i, cell in enumerate(cells) if grade_id(cell) == exercise]
    return index


def worker_breakers(nb: str) -> dict[str, Student]:
    """Notebook 01: everything that ends, hangs or floods the worker, or tampers with the notebook."""
    return {
        "patches_builtins": Student(
            {
                "learned_positions": wrong(nb, "learned_positions") + "\nimport builtins\n"
                "builtins.isinstance = lambda *a: True\nbuiltins.AssertionError = Warning\n"
            },
            {"learned_positions"},
        ),
        "exits_in_cell": Student(
            {"input_embedding": right(nb, "input_embedding") + "\nimport os\nos._exit(0)\n"}, {"input_embedding"}
        ),
        "exits_in_forward": Student(
            {
                "learned_positions": right(nb, "learned_positions").replace(
                    "def forward(self, positions: torch.Tensor) -> torch.Tensor:\n",
                    "def forward(self, positions: torch.Tensor) -> torch.Tensor:\n        import os; os._exit(1)\n",
                )
            },
            {"learned_positions"},
        ),
        "loops_forever": Student(
            {"sinusoidal": "while True:\n    pass\n"}, {"sinusoidal"}, says={"sinusoidal": ("infinite loop",)}
        ),
        "prints_megabytes": Student({"embedding": right(nb, "embedding") + '\nprint("spam " * 4_000_000)\n'}, set()),
        # The message names the cell as the student counts, from 1 (not its 0-based index).
        "raises": Student(
            {"input_embedding": 'raise RuntimeError("I give up")\n'},
            {"input_embedding"},
            says={"input_embedding": (f"I give up (line 1 of cell {_answer_cell(nb, 'input_embedding') + 1},",)},
        ),
        # A cell that hangs when the grader replays it (after a later cell ended the process) costs its exercise.
        "replays_differently": Student(
            {
                "sinusoidal": attacks.REPLAYS_DIFFERENTLY + right(nb, "sinusoidal"),
                "learned_positions": right(nb, "learned_positions") + "\nimport os\nos._exit(1)\n",
            },
            {"sinusoidal", "learned_positions"},
            says={"sinusoidal": ("when the grader ran it again",)},
        ),
        # Modules beside the notebook that would end the worker if it imported them as it starts.
        "shadows_modules": Student(
            {"embedding": "from mylocal import SCALE\n" + right(nb, "embedding")},
            set(),
            files={
                **{f"{name}.py": attacks.SHADOW.format(name=name) for name in attacks.SHADOWED},
                "mylocal.py": "SCALE = 1.0\n",
            },
        ),
        "deletes_tests": Student({"embedding": wrong(nb, "embedding")}, {"embedding"}, edit="delete"),
        "edits_tests": Student({"embedding": wrong(nb, "embedding")}, {"embedding"}, edit="edit"),
    }


NBGRADER_ATTACKS = [
    attacks.Attack(
        "copies_solution",
        attacks.SDPA,
        "import json, pathlib\n"
        "source = pathlib.Path.cwd().parents[2] / 'solutions' / '04_attention' / '04_attention.ipynb'\n"
        "for cell in json.loads(source.read_text())['cells']:\n"
        "    if cell['cell_type'] == 'code' and 'BEGIN SOLUTION' in ''.join(cell['source']):\n"
        "        exec(''.join(cell['source']))",
        ("No such file",),
    ),
    attacks.Attack(
        "copies_classmate",
        attacks.DECODER,
        "import json, pathlib\n"
        "theirs = pathlib.Path.cwd().parents[2] / 'submitted' / 'full' / '04_attention' / '04_attention.ipynb'\n"
        "exec('\\n'.join(''.join(c['source']) for c in json.loads(theirs.read_text())['cells']\n"
        "                if c['cell_type'] == 'code'))",
        ("No such file",),
    ),
    attacks.Attack(
        "edits_gradebook",
        attacks.CROSS,
        "import pathlib, sqlite3\n"
        "db = sqlite3.connect(pathlib.Path.cwd().parents[2] / 'gradebook.db')\n"
        "db.execute('UPDATE grade SET manual_score = 100')\ndb.commit()",
        ("OperationalError", "Error"),
    ),
]


def attackers(nb: str, harm: attacks.Harm) -> dict[str, Student]:
    """Notebook 04: each attack on the grader is one student."""
    return {
        attack.name: Student(
            {attack.exercise: attack.answer(right(nb, attack.exercise), harm)},
            {attack.exercise},
            says={attack.exercise: attack.says} if attack.says else {},
        )
        for attack in attacks.ATTACKS + NBGRADER_ATTACKS
    }


def class_of(notebook: str, harm: attacks.Harm) -> dict[str, Student]:
    # No other exercise builds on the last one: left as released, its stub costs no other exercise its mistake's
    # message, and the cheat in the answer before it reaches no mistake after it.
    *answered, last = [e.id for e in checks_for(notebook).exercises]
    students = {"full": Student({}, set())}
    if walks_the_failures(notebook):
        # Every answer but the last a plausible mistake, the last of them also cheating (the trick must not earn
        # it), and the last exercise not started: one grading walks both ways of failing.
        students["unfinished"] = Student(
            {e: wrong(notebook, e) + (PATCH_TORCH + FAKE_AUTOGRADER) * (e == answered[-1]) for e in answered},
            set(points(notebook)),
            forges_verdicts=True,
            unstarted=frozenset({last}),
        )
    if notebook == "01_tokens_embeddings":
        students |= worker_breakers(notebook)
    if notebook == attacks.NOTEBOOK:
        students |= attackers(notebook, harm)
    return students


FORGED_VERDICT = {"passed": True, "state": "passed", "note": "", "checks": []}


def submission(release, notebook: str, student: Student):
    nb = copy.deepcopy(release)
    if student.forges_verdicts:
        for cell in nb.cells:
            cell.metadata[VERDICT_KEY] = dict(FORGED_VERDICT)
    if student.answers is None:
        return nb
    for cell in nb.cells:
        if grade_id(cell) in points(notebook) and grade_id(cell) not in student.unstarted:
            cell.source = student.answers.get(grade_id(cell), right(notebook, grade_id(cell)))
    if student.edit == "delete":
        nb.cells = [c for c in nb.cells if not is_test_id(grade_id(c))]
    elif student.edit == "edit":
        for cell in nb.cells:
            if is_test_id(grade_id(cell)):
                cell.source = 'print("All visible checks passed.")'
    return nb


def nbgrader(course: Path, *args, env: dict | None = None, wrapper: list[str] = ()):
    """``nbgrader ARGS`` in ``course``, run through ``wrapper`` (e.g. prlimit) when given."""
    env = dict(env or os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [*wrapper, str(Path(sys.executable).parent / "nbgrader"), *args, "--log-level=WARN"],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


@dataclass
class GradedClass:
    notebook: str
    folder: Path
    students: dict[str, Student]
    harms: list[str]  # what the attackers managed to do (must be nothing)
    untouched: bool  # the instructor's files and the submissions are byte for byte as before
    log: str = ""  # what nbgrader said (warnings and errors) while releasing, grading, feeding back and exporting
    # Every class graded in the same folder and nbgrader commands (this one included), whose students ``log`` is about
    graded_with: dict[str, dict[str, Student]] = field(default_factory=dict)


# The classes graded together: one course folder holding several notebooks, graded by one `nbgrader autograde "*"`,
# one `generate_feedback "*"` and one `export`, as an instructor grades several assignments at once. Each nbgrader
# command and each grader's zygote costs seconds of start-up (benchmarks/suite_time.md), once per folder rather than
# per notebook. Notebook 01's class (the students who hang, at a shorter timeout) and notebook 04's (the attackers)
# keep folders of their own; the other twelve are split in two halves of about equal time, one per xdist worker
# (tests/conftest.py gives each folder's test classes one scope).
# A new notebook joins the second half by itself (no list to extend); move it to the first to even them out.
_ALONE = ("01_tokens_embeddings", attacks.NOTEBOOK)
_FIRST_HALF = (
    "00_welcome",
    "03_rope",
    "05_multihead_attention",
    "07_blocks",
    "09_bert_encoder_decoder",
    "11_decoding",
    "16_serving_scaling",
)
GRADED_TOGETHER = (
    _FIRST_HALF,
    tuple(notebook for notebook in NOTEBOOKS if notebook not in _FIRST_HALF + _ALONE),
    *((notebook,) for notebook in _ALONE),
)


def walks_the_failures(notebook: str) -> bool:
    """Whether ``notebook``'s class has the unfinished student: the first notebook of each course folder has
    (notebooks 01 and 02 read its feedback), so every ``nbgrader autograde`` of the suite grades one."""
    return notebook == graded_with(notebook)[0]


def test_each_notebook_is_graded_in_one_folder():
    assert sorted(notebook for together in GRADED_TOGETHER for notebook in together) == sorted(NOTEBOOKS)


def graded_with(notebook: str) -> tuple[str, ...]:
    (together,) = [together for together in GRADED_TOGETHER if notebook in together]
    return together


def graded(notebook: str, scratch: Path) -> GradedClass:
    """``notebook``'s class, graded with the others of its folder (``GRADED_TOGETHER``)."""
    return graded_folder(graded_with(notebook), scratch)[notebook]


@functools.cache
def graded_folder(notebooks: tuple[str, ...], scratch: Path) -> dict[str, GradedClass]:
    """Release ``notebooks`` into one course folder (tests/released.py), submit each one's class, autograde
    (sandboxed), feed back and export, once per worker."""
    folder = scratch / "+".join(notebook[:2] for notebook in notebooks)
    generation_log = release_into(folder, *notebooks)
    shutil.copytree(ROOT / "data" / "tinystories", folder / "data" / "tinystories")
    harm = attacks.Harm(folder=folder / "autograded")
    classes = {}
    for notebook in notebooks:
        release = read(folder / "course" / notebook / f"{notebook}.ipynb")
        # Run All goes on past a failing test cell (tools/run_all_tags.py); the students of ``zero`` prove
        # that grading still scores such a cell 0.
        assert all("raises-exception" in c.metadata.get("tags", []) for c in release.cells if is_graded_cell(c)), (
            "the release's test cells lost their tag"
        )
        classes[notebook] = class_of(notebook, harm)
        for name, student in classes[notebook].items():
            (folder / "submitted" / name / notebook).mkdir(parents=True)
            nbformat.write(
                submission(release, notebook, student), folder / "submitted" / name / notebook / f"{notebook}.ipynb"
            )
            for file, text in student.files.items():
                (folder / "submitted" / name / notebook / file).parent.mkdir(parents=True, exist_ok=True)
                (folder / "submitted" / name / notebook / file).write_text(text)
    instructor = [
        folder / "solutions",
        folder / "course",
        folder / "data",
        folder / "nbgrader_config.py",
        folder / "submitted",
    ]
    before = attacks.checksum(*instructor)
    timeout = HANGING_CLASS_TIMEOUT if notebooks == ("01_tokens_embeddings",) else TIMEOUT
    done = nbgrader(
        folder,
        "autograde",
        "*",
        f"--TrustedVerdict.timeout={timeout}",
        f"--TrustedVerdict.max_file_size={attacks.FILE_SIZE_LIMIT}",
        env=harm.environment(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = [
        done,
        nbgrader(folder, "generate_feedback", "*"),
        nbgrader(folder, "export", "--to", str(folder / "grades.csv")),
    ]
    assert said[-2].returncode == 0 and said[-1].returncode == 0
    harms, untouched = harm.check(), attacks.checksum(*instructor) == before
    log = generation_log + "".join(step.stdout + step.stderr for step in said)
    return {
        notebook: GradedClass(notebook, folder, students, harms, untouched, log, classes)
        for notebook, students in classes.items()
    }


@pytest.fixture(scope="session")
def scratch(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("classes")
    path.chmod(0o755)
    return path


def _scores(course: GradedClass, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course.folder / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(course.notebook, course.notebook, student)
        return {answer_id(grade.name): grade.score for grade in notebook.grades}


def _feedback_path(course: GradedClass, student: str) -> Path:
    return course.folder / "feedback" / student / course.notebook / f"{course.notebook}.html"


@functools.cache
def _mathjax() -> str:
    """The inlined MathJax every feedback carries (nbgrader_config.py)."""
    return course_script("mathjax-tex-svg-full.js")


def _feedback(course: GradedClass, student: str) -> str:
    """The feedback's text, without the inlined MathJax (2 MB of library, none of it the course's)."""
    return html_text(_feedback_path(course, student).read_text().replace(_mathjax(), ""))


@functools.cache  # asked by each of a class's three tests that take a student: build the class once
def _student_names(notebook: str) -> tuple[str, ...]:
    # The attackers' answers need a Harm; only the names are kept, so it need not checksum the course.
    harm = attacks.Harm(folder=Path("/nonexistent"), before="")
    names = tuple(class_of(notebook, harm))
    harm.server.close()
    return names


def pytest_generate_tests(metafunc):
    if "student" in metafunc.fixturenames:
        metafunc.parametrize("student", _student_names(metafunc.cls.notebook))


class _GradedClassTests:
    """The tests of one notebook's class; ``TestClassNN`` below binds ``notebook``."""

    notebook: str

    @pytest.fixture
    def course(self, scratch) -> GradedClass:
        require_sandbox()
        return graded(self.notebook, scratch)

    def test_gradebook_holds_the_trusted_verdict(self, course, student):
        expected = {e: 0 if e in course.students[student].zero else p for e, p in points(self.notebook).items()}
        assert _scores(course, student) == expected

    def test_each_test_cell_keeps_the_graders_verdict_as_data(self, course, student):
        """The autograded notebook's test cells hold the grader's verdict (passed, each check's status), the one
        the gradebook's score says; no other cell holds one, whatever the submission wrote into its metadata."""
        path = course.folder / "autograded" / student / self.notebook / f"{self.notebook}.ipynb"
        cells = read(path).cells
        verdicts = {grade_id(c): verdict_of(c) for c in cells if is_test_cell(c)}
        scores = _scores(course, student)
        assert set(verdicts) == {test_id(e) for e in scores}
        for exercise, score in scores.items():
            verdict = verdicts[test_id(exercise)]
            assert verdict is not None and verdict.id == exercise, verdict  # from_json read it: statuses are enums
            assert verdict.passed == (score == points(self.notebook)[exercise]), verdict
            if exercise in course.students[student].stubbed(self.notebook):
                assert Status.NOT_IMPLEMENTED in {check.status for check in verdict.checks}, verdict
        assert [c for c in cells if not is_test_cell(c) and verdict_of(c) is not None] == []

    def test_feedback_says_why_and_shows_no_hidden_test(self, course, student):
        text = _feedback(course, student)
        for exercise, fragments in course.students[student].says.items():
            assert any(f in text for f in fragments), f"{exercise}: none of {fragments} in the feedback"
        assert not leaked(secret_lines(read(solution_path(self.notebook)), "hidden"), text)

    def test_the_class_did_no_harm_and_the_export_adds_up(self, course):
        assert course.harms == []
        assert course.untouched, "the instructor's files or the submissions changed during autograde"
        with open(course.folder / "grades.csv") as handle:
            rows = {
                row["student_id"]: float(row["raw_score"])
                for row in csv.DictReader(handle)
                if row["assignment"] == self.notebook
            }
        # nbgrader exports a row for every student of the course folder: 0 where this notebook was not submitted
        folder_students = {name for students in course.graded_with.values() for name in students}
        assert rows == {name: 0 for name in folder_students} | {
            name: sum(p for e, p in points(self.notebook).items() if e not in s.zero)
            for name, s in course.students.items()
        }

    def test_nbgrader_warns_only_of_what_students_did(self, course):
        """An untouched test cell (the stub's, everyone's) raises no tampering warning; an edited one does.

        Each test cell is named once for each student who edited it (or deleted it), and for no one
        else. Nor does nbgrader say anything that is not about a submission: SQLAlchemy's warnings,
        a restored cell without an id, options it does not know, images without alternative text.
        """
        for edit, said in (
            ("edit", r"Attribute 'checksum' for cell (\S+) has changed!"),
            ("delete", r"Missing grade cell (\S+) encountered"),
        ):
            named = [  # the log is of every class graded with this one
                exercise.test_cell_id
                for notebook, students in course.graded_with.items()
                for exercise in checks_for(notebook).exercises
                for student in students.values()
                if student.edit == edit
            ]
            assert sorted(re.findall(said, course.log)) == sorted(named), course.log[-3000:]
        # Python's warnings (SAWarning, nbformat's MissingIDFieldWarning for a restored cell) and traitlets' and nbconvert's
        for noise in ("Warning:", "not recognized", "Alternative text is missing"):
            assert noise not in course.log, course.log[-3000:]

    def test_feedback_shows_no_solution_but_what_the_student_wrote(self, course, student):
        """Each exercise left as released gets feedback that says what to do, and no feedback shows a line of the
        solutions that the student's own notebook does not hold (the wrong answers are edits of the right ones)."""
        text = _feedback(course, student)
        stubbed = course.students[student].stubbed(self.notebook)
        assert text.count("not implemented yet") >= len(stubbed), text[-2000:]
        submitted = read(course.folder / "submitted" / student / self.notebook / f"{self.notebook}.ipynb")
        written = normalise("\n".join(cell.source for cell in submitted.cells if cell.cell_type == "code"))
        assert not leaked(secret_lines(read(solution_path(self.notebook)), "solution", shown_before=written), text)


class TestClass01(_GradedClassTests):
    notebook = "01_tokens_embeddings"

    def test_feedback_shows_what_the_cells_printed(self, course):
        """The worker records the student's outputs for the feedback: text and figures."""
        html = _feedback_path(course, "full").read_text()
        assert "data:image/png;base64," in html
        # described by its titles and axis labels (autograder.outputs); the attributes in any order
        assert re.search(r'<img\b[^>]*\salt="Figure', html)
        assert "spam spam" in _feedback(course, "prints_megabytes")
        assert "standard deviation" in _feedback(course, "unfinished")  # the wrong Embedding's init

    def test_feedback_says_what_the_grader_saw(self, course):
        """A class the failed answer cell never defined: the grader ran every cell, so "run its answer cell
        first", right in the notebook, is not what the feedback says."""
        text = _feedback(course, "raises")
        assert "the grader ran every cell of your notebook from the top" in text, text[-2000:]
        assert "run its answer cell" not in text


# After MathJax has typeset the page: how many formulas it drew (-1 when MathJax never loaded), and the text of
# the Markdown cells (where the formulas were).
TYPESET = """async () => {
    if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) return {drawn: -1, text: []};
    await MathJax.startup.promise;
    return {drawn: document.querySelectorAll("mjx-container svg").length,
            text: [...document.querySelectorAll(".text_cell_render")].map(cell => cell.innerText)};
}"""
RAW_TEX = re.compile(r"\$[^$]*\\[A-Za-z]+[^$]*\$")  # $\gamma$, $x \cdot y$: maths left as its source


class TestClass02(_GradedClassTests):
    notebook = "02_normalization"

    def test_feedback_carries_its_mathjax(self, course):
        """The feedback loads no script from anywhere: MathJax 3 is in the page, not on a CDN."""
        html = _feedback_path(course, "full").read_text()
        assert _mathjax() in html
        assert not re.findall(r"<script[^>]*\bsrc=", html), "a script loaded from elsewhere"
        assert "cdnjs.cloudflare.com" not in html and "text/x-mathjax-config" not in html  # nbconvert's MathJax 2
        assert "$\\gamma$" in html  # the maths the browser test below sees typeset

    def test_feedback_is_the_page_nbconverts_own_exporter_writes(self, course):
        """``FeedbackExporter`` (nbgrader_config.py) skips ``HTMLExporter``'s second pass over the page, which had
        nothing to change on the course's feedback: the unfinished student's page, figures and failing reasons
        included, is the document nbconvert's own exporter writes, but for how BeautifulSoup spells its HTML."""
        from bs4 import BeautifulSoup

        theirs = course.folder / "feedback-nbconvert"
        done = nbgrader(
            course.folder,
            "generate_feedback",
            self.notebook,
            "--student=unfinished",
            f"--CourseDirectory.feedback_directory={theirs.name}",
            "--GenerateFeedback.exporter_class=nbconvert.exporters.HTMLExporter",
        )
        assert done.returncode == 0, done.stderr[-2000:]
        ours = _feedback_path(course, "unfinished").read_text()
        assert "<img" in ours and "Score: 0.0" in ours  # a page with figures and failing grades
        assert (
            str(BeautifulSoup(ours, "html.parser"))
            == (theirs / "unfinished" / self.notebook / f"{self.notebook}.html").read_text()
        )

    @requires_browser
    def test_feedback_typesets_its_maths_offline(self, course):
        """Opened from disk with every outside request refused, the feedback draws its formulas: no raw $\\gamma$."""
        page_url = _feedback_path(course, "full").as_uri()
        with offline_page() as browsing:
            requests = []
            browsing.page.on("request", lambda request: requests.append(request.url))
            browsing.page.goto(page_url)
            typeset = browsing.page.evaluate(TYPESET)
        assert browsing.blocked == [] and browsing.page_errors == []
        assert [url for url in requests if not url.startswith("data:")] == [page_url]
        assert typeset["drawn"] >= 10, typeset["drawn"]
        raw = [found for text in typeset["text"] for found in RAW_TEX.findall(text)]
        assert raw == [] and "\\gamma" not in "".join(typeset["text"]), raw[:5]

    @requires_browser
    def test_feedback_wraps_every_reason_at_the_pages_width(self, course):
        """Issue 52 §3: at the width JupyterLab's HTML viewer gives a 1000-px window (an 846-px frame), no output of
        the unfinished student's feedback, each exercise's reason among them, runs past the page: nothing to scroll
        sideways for. ``WIDEST`` measures every output's text block against the box it is drawn in."""
        with offline_page(width=846, height=900) as browsing:
            browsing.page.goto(_feedback_path(course, "unfinished").as_uri())
            widths = browsing.page.evaluate(WIDEST)
        assert widths["blocks"] >= len(points(self.notebook)), widths  # the reasons were measured
        assert widths["overflowing"] == [], widths


for _notebook in NOTEBOOKS:
    _name = f"TestClass{_notebook[:2]}"
    if _name not in globals():  # TestClass01 above adds its own tests
        globals()[_name] = type(_name, (_GradedClassTests,), {"notebook": _notebook})


def _one_right_submission(course: Path, notebook: str) -> None:
    """A course folder with ``notebook`` released and one student, "full", who submitted the solution."""
    release_into(course, notebook)
    (course / "submitted" / "full" / notebook).mkdir(parents=True)
    shutil.copy(solution_path(notebook), course / "submitted" / "full" / notebook)


def test_autograde_refuses_without_a_sandbox_unless_allowed(tmp_path):
    """Fail closed: no bubblewrap, no grading, and one line that says what to do; the instructor may opt out."""
    notebook = "02_normalization"
    _one_right_submission(tmp_path, notebook)
    without = dict(os.environ, AUTOGRADER_BWRAP="/nonexistent/bwrap")

    refused = nbgrader(tmp_path, "autograde", notebook, env=without)
    assert refused.returncode != 0
    said = [line for line in refused.stderr.splitlines() if "refusing to run student code unsandboxed" in line]
    assert said and "apt-get install bubblewrap" in said[0] and "allow_unsandboxed = True" in said[0], refused.stderr
    assert not (tmp_path / "autograded" / "full" / notebook).exists()
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:  # refused: no score, not even a 0
        with pytest.raises(MissingEntry):
            gradebook.find_submission(notebook, "full")

    allowed = nbgrader(tmp_path, "autograde", notebook, "--TrustedVerdict.allow_unsandboxed=True", env=without)
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert "WITHOUT a sandbox" in allowed.stderr
    course = GradedClass(notebook, tmp_path, {"full": Student({}, set())}, [], True)
    assert _scores(course, "full") == points(notebook)


def test_autograde_stops_when_a_limit_cannot_be_set(tmp_path):
    """Under a hard file-size limit below the one grading sets, nbgrader grades nothing and says which limit."""
    require_sandbox()
    notebook = "02_normalization"
    _one_right_submission(tmp_path, notebook)
    done = nbgrader(tmp_path, "autograde", notebook, wrapper=["prlimit", "--fsize=10000000:10000000"])
    assert done.returncode != 0
    assert "file size limit (1 GB) could not be set" in done.stderr, done.stderr[-3000:]
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:  # not graded: no score, not even a 0
        with pytest.raises(MissingEntry):
            gradebook.find_submission(notebook, "full")
