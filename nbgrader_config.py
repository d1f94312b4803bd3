"""nbgrader configuration: solutions/ is the source, course/ the student release."""

from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ClearSolutions,
    ComputeChecksums,
    DeduplicateIds,
    GetGrades,
    IgnorePattern,
    IncludeHeaderFooter,
    InstantiateTests,
    LimitOutput,
    LockCells,
    OverwriteKernelspec,
    SaveAutoGrades,
    SaveCells,
)

from autograder.nbgrader_plugin import (
    CsvExportKeepsUngradedEmpty,
    FeedbackClearHiddenTests,
    FeedbackExporter,
    FeedbackOutputsWrap,
    RestoreCells,
    TrustedVerdict,
    course_script,
    feedback_template_dirs,
    quiet_gradebook_warnings,
)

c = get_config()  # noqa: F821 - provided by nbgrader

c.CourseDirectory.root = str(Path(__file__).parent)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "course"
c.CourseDirectory.course_id = "transformer-from-scratch"

# The gradebook records each cell as released, hidden tests removed: nbgrader's default order saves
# the cells before ClearHiddenTests, so every untouched test cell with a hidden test differed from its
# record, and `autograde` warned "Attribute 'checksum' for cell *_test has changed!" for every
# submission (jupyter/nbgrader#1961). Saved after, a clean submission autogrades without that warning
# and a test cell a student edited still warns, and is put back as released. The hidden checks do not
# depend on it: TrustedVerdict runs every exercise's hidden checks from autograder/notebooks, never the
# test cells' source.
c.GenerateAssignment.preprocessors = [
    IncludeHeaderFooter,
    InstantiateTests,
    LockCells,
    ClearSolutions,
    ClearOutput,
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ComputeChecksums,
    SaveCells,
    CheckCellMetadata,
]

# A deleted test cell comes back from the gradebook and is graded like any other; RestoreCells is
# nbgrader's OverwriteCells, and also gives each cell it puts back the cell id nbformat requires.
c.OverwriteCells.add_missing_cells = True
c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec, RestoreCells, CheckCellMetadata]

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

# Feedback never shows the hidden tests' source (none reaches the autograded notebook now, but a
# gradebook written before the order above still holds them), and its outputs wrap at the page's width.
c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, FeedbackClearHiddenTests, FeedbackOutputsWrap]
# Feedback typesets its maths offline: nbgrader's feedback template, with MathJax inlined from coursetools/static
# instead of loaded from a CDN (autograder/templates/feedback/mathjax.html.j2; 2.3 MB more per HTML file).
c.HTMLExporter.extra_template_basedirs = feedback_template_dirs()
# ... and nbconvert's HTML exporter skips its second pass over a page where it would change nothing (1 s a page).
c.GenerateFeedback.exporter_class = FeedbackExporter
c.HTMLExporter.filters = {"course_script": course_script}

# A submission that could not be graded (the grader failed, see TrustedVerdict) is exported with empty
# scores, not the 0 nbgrader writes for every student without a graded submission.
c.ExportApp.plugin_class = CsvExportKeepsUngradedEmpty

quiet_gradebook_warnings()  # nbgrader's own harmless SQLAlchemy warnings (see the function)
