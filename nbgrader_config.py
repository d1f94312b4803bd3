"""nbgrader configuration: solutions/ is the source, course/ the student release."""

from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)

from autograder.nbgrader_plugin import ResilientExecute, TrustedVerdict

c = get_config()  # noqa: F821 - provided by nbgrader

c.CourseDirectory.root = str(Path(__file__).parent)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "course"
c.CourseDirectory.course_id = "transformer-from-scratch"

# A deleted test cell comes back from the gradebook and is graded like any other.
c.OverwriteCells.add_missing_cells = True

# Per-cell time limit in the student's kernel, and per cell/call in the grading worker.
c.Execute.timeout = 30
c.TrustedVerdict.timeout = 30

# The verdict that SaveAutoGrades records is written by TrustedVerdict, after the kernel ran.
c.Autograde.autograde_preprocessors = [
    ResilientExecute,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    TrustedVerdict,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]

# Feedback never shows the hidden tests' source.
c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, ClearHiddenTests]
