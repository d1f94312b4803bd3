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

from autograder.nbgrader_plugin import TrustedVerdict

c = get_config()  # noqa: F821 - provided by nbgrader

c.CourseDirectory.root = str(Path(__file__).parent)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "course"
c.CourseDirectory.course_id = "transformer-from-scratch"

# A deleted test cell comes back from the gradebook and is graded like any other.
c.OverwriteCells.add_missing_cells = True

# Student code runs only in the sandboxed grading worker (see README, "Security model"):
# TrustedVerdict replaces nbgrader's Execute, records the cells' outputs for the feedback,
# and writes the verdict that SaveAutoGrades records. Limits per cell or call, and per process:
c.TrustedVerdict.timeout = 30  # seconds
c.TrustedVerdict.memory_limit = "3G"
c.TrustedVerdict.max_processes = 256  # processes and threads
c.TrustedVerdict.max_file_size = "1G"
# Without bubblewrap, autograde refuses to run; True grades anyway, with your permissions.
c.TrustedVerdict.allow_unsandboxed = False

c.Autograde.autograde_preprocessors = [
    TrustedVerdict,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]

# Feedback never shows the hidden tests' source.
c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, ClearHiddenTests]
