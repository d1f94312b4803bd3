import os
import tempfile
from pathlib import Path

import pytest
import torch
from notebooks import ROOT, read, release_path, run_here, solution_path
from xdist.scheduler import LoadScopeScheduling

# The suite never downloads: notebook 08's real-GPT-2 cell skips in one line, in nbval's kernels too
# (tests/test_pretrained.py checks the download code against a local stand-in for the hub).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The solution notebooks' TinyStories training demos (notebook 10's story model, 160 steps; notebook 13's run, 80),
# whose outputs nbval ignores, run 5 steps in nbval's kernels, as in the browser's Run All: the same code, its
# evaluation, checkpoint and samples included, 35 s less of the suite (benchmarks/suite_time.md). The default length
# is what `make outputs` records and what students run.
os.environ.setdefault("COURSE_TINYSTORIES_STEPS", "5")

# Every notebook's long demonstrations (the training runs, timings and sampling that `short_runs()` shortens while
# graded; their outputs depend on the CPU, so nbval ignores them) run short in nbval's and the browser's kernels
# too: the same code, the rest of each notebook compared as recorded. `make outputs` records them at full length.
os.environ.setdefault("COURSE_SHORT_RUNS", "1")

# pytest-xdist runs one worker per core: a second torch thread in a worker, its notebook kernels or its
# grading workers only fights the other worker for the cores (notebook 10's training cells ran 5-10x slower).
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# `progress` keeps its results between runs (autograder.progress_cache): each test process gets an empty cache
# of its own, never the user's.
os.environ["COURSE_PROGRESS_CACHE"] = tempfile.mkdtemp(prefix="progress-cache-")


@pytest.hookimpl(optionalhook=True)  # xdist's hook: `pytest -p no:xdist` must still load this file
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope`` (``make test``) with the scopes the suite needs; see ``SuiteScopes``."""
    if config.getvalue("dist") == "loadscope":
        return SuiteScopes(config, log)
    return None


class SuiteScopes(LoadScopeScheduling):
    """pytest-xdist's loadscope (a test class, or a module's functions, runs on one worker), with the scopes of
    ``suite_scope``, the longest (``longest_scopes``) queued first."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.shared = shared_scopes()
        self.seconds = longest_scopes()
        self.queued_longest_first = False

    def _split_scope(self, nodeid: str) -> str:
        return suite_scope(nodeid, self.shared)

    def _assign_work_unit(self, node) -> None:
        if not self.queued_longest_first:  # the queue is whole before its first unit is handed out
            units = sorted(self.workqueue.items(), key=lambda unit: -self.seconds.get(unit[0], 0))  # stable
            self.workqueue.clear()
            self.workqueue.update(units)
            self.queued_longest_first = True
        super()._assign_work_unit(node)


def longest_scopes() -> dict[str, float]:
    """Scope -> the seconds it took, for the suite's longest scopes (a profiled fresh clone on the 2-core machine,
    232912e, 2026-11-29 22:08, benchmarks/suite_time.md: the sums of its ``--junitxml`` times per scope).

    The workers take scopes in queue order, and xdist queues them by their number of tests, so a long scope of
    few tests came last: the hub's one test (51 s then) kept one worker busy while the other had finished. Queued
    longest first, the many short scopes even out the end. A stale figure costs only that balance;
    test_suite_scopes checks that each name is still a scope."""
    return {
        "tests/test_sandbox.py": 235,
        folder_scope("02_normalization"): 227,
        folder_scope("00_welcome"): 194,
        folder_scope("04_attention"): 190,
        "tests/test_grader_failures.py": 147,
        "tests/test_tinystories_gpu_paths.py": 139,
        "notebook 14_systems": 139,
        "tests/test_hub.py": 132,
        "tests/test_run_all_browser.py::TestRunAllLate": 125,
        "tests/test_tinystories_cli.py": 115,
        "tests/test_run_all_browser.py::TestRunAllEarly": 115,
        "tests/test_class_grading.py": 113,
        "notebook 12_bpe": 90,
        folder_scope("01_tokens_embeddings"): 81,
        "tests/test_environment.py": 76,
        "tests/test_student_session.py": 68,
        "solutions/10_training/10_training.ipynb": 66,
        "tests/test_colab_notebook.py": 56,
        "notebook 13_tinystories": 53,
        "tests/test_attention_view.py": 52,
        "tests/test_multiuser_exchange.py": 51,
        "solutions/07_blocks/07_blocks.ipynb": 42,
        "tests/test_class_report.py": 40,
    }


IN_PROCESS_FIXTURES = {"solution_namespaces", "stub_namespaces"}  # a notebook's cells, executed in the test process


def in_process_notebooks() -> dict[str, str]:
    """Scope (path::Class) -> notebook, for the classes that execute that notebook's cells in the test process
    (``IN_PROCESS_FIXTURES``)."""
    import test_checks
    import test_right_styles_12_13
    import test_wrong_implementations

    return {
        f"{Path(module.__file__).resolve().relative_to(ROOT).as_posix()}::{cls.__name__}": cls.notebook
        for module in (test_checks, test_wrong_implementations, test_right_styles_12_13)
        for cls in vars(module).values()
        if isinstance(cls, type) and hasattr(cls, "notebook")
    }


def graded_together() -> dict[str, str]:
    """Scope (path::Class) -> its course folder, for the nbgrader classes graded in one folder
    (``test_nbgrader_e2e.GRADED_TOGETHER``)."""
    import test_nbgrader_e2e as e2e

    path = Path(e2e.__file__).resolve().relative_to(ROOT).as_posix()
    return {
        f"{path}::{cls.__name__}": folder_scope(cls.notebook)
        for cls in vars(e2e).values()
        if isinstance(cls, type) and issubclass(cls, e2e._GradedClassTests) and hasattr(cls, "notebook")
    }


def folder_scope(notebook: str) -> str:
    """The scope of the nbgrader classes graded in the course folder of ``notebook``."""
    from test_nbgrader_e2e import graded_with

    return "nbgrader folder " + "+".join(graded_with(notebook))


def shared_scopes() -> dict[str, str]:
    """Scope (path::Class) -> the scope it shares with other classes: one per notebook for the classes that execute
    it in the test process (``in_process_notebooks``), one per course folder for the nbgrader classes graded
    together (``graded_together``)."""
    return {scope: f"notebook {notebook}" for scope, notebook in in_process_notebooks().items()} | graded_together()


def suite_scope(nodeid: str, shared: dict[str, str]) -> str:
    """The scope of a test: its class (path::Class), or its module for a module's function or a notebook's cell
    (nbval). Cut at the class, not at the last "::" as loadscope does: TestChecksNN's test ids hold "::", and
    loadscope made each of those tests a scope of its own. The classes of ``shared`` share one scope: TestChecksNN
    with TestWrongNN, so that one worker executes that notebook, not both, and the nbgrader classes graded in one
    course folder, so that one worker grades that folder."""
    path, _, rest = nodeid.partition("::")
    name, inside, _ = rest.partition("::")
    if not inside or "[" in name:
        return path
    scope = f"{path}::{name}"
    return shared.get(scope, scope)


class _Executed(dict):
    """Notebook name -> the namespace its student cells leave, executed on first use.

    Under pytest-xdist each worker executes only the notebooks its tests ask for.
    """

    def __init__(self, path_of):
        super().__init__()
        self._path_of = path_of

    def __missing__(self, notebook: str) -> dict:
        path = self._path_of(notebook)
        self[notebook] = run_here(read(path), path.parent)
        return self[notebook]


@pytest.fixture(scope="session")
def solution_namespaces() -> dict:
    """Each solution notebook executed once in this process, by notebook name."""
    return _Executed(solution_path)


@pytest.fixture(scope="session")
def stub_namespaces() -> dict:
    """Each released (stub) notebook executed once in this process, by notebook name."""
    return _Executed(release_path)
