"""nbgrader integration: the verdict comes from a process the student's code never ran in.

nbgrader runs the student's cells and then the test cells in one kernel, and scores a
test cell by whether its output shows an error; code in that kernel can fake any
output. ``TrustedVerdict`` runs after ``Execute``: it grades the notebook with
``autograder.grading`` (student code in a worker, checks here) and REPLACES the outputs
of every test cell with that verdict, so ``SaveAutoGrades`` records it.
``ResilientExecute`` keeps a kernel that dies (``os._exit``) from failing the whole
submission: the cells it reached keep their outputs, the verdict does the rest.
"""

from __future__ import annotations

from pathlib import Path

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Float

from autograder.grading import DEFAULT_TIMEOUT, grade, is_test_cell


class ResilientExecute(Execute):
    """nbgrader's Execute, except that a broken kernel ends execution, not the submission.

    Student code can kill the kernel (``os._exit``) or wreck it (patched builtins leave
    it unable to answer); the cells run so far keep their outputs, and the grade does
    not depend on this kernel anyway.
    """

    def preprocess(self, nb, resources=None, km=None):
        try:
            return super().preprocess(nb, resources, km=km)
        except (DeadKernelError, CellTimeoutError, RuntimeError) as error:
            self.log.warning("The student's kernel stopped working: %s", str(error).splitlines()[0])
            return nb, resources


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


class TrustedVerdict(NbGraderPreprocessor):
    """Grade in a separate process and write the verdict into the test cells."""

    timeout = Float(DEFAULT_TIMEOUT, help="Seconds per cell and per call into student code.").tag(config=True)

    def preprocess(self, nb, resources):
        name = resources["metadata"]["name"]  # the notebook's file stem, which names its checks
        cwd = Path(resources["metadata"].get("path") or ".")
        report = grade(nb, name, cwd, timeout=self.timeout)
        by_test_cell = {r.exercise.test_cell_id: r for r in report.exercises}
        for cell in nb.cells:
            if cell.cell_type != "code" or not is_test_cell(cell):
                continue
            grade_id = cell.metadata["nbgrader"].get("grade_id", "")
            result = by_test_cell.get(grade_id)
            if result is None:  # a graded cell with no checks behind it never passes
                cell.outputs = [NotebookNode(output_type="error", ename="UnknownTest", evalue=grade_id,
                                             traceback=[f"no checks are registered for test cell {grade_id!r}"])]
            else:
                cell.outputs = _verdict_outputs(result)
        self.log.info("Trusted verdict for %s: %s/%s", name, report.score, report.max_score)
        return nb, resources
