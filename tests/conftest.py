import os
import tempfile

import pytest
import torch
from notebooks import read, release_path, run_here, solution_path

# The suite never downloads: notebook 08's real-GPT-2 cell skips in one line, in nbval's kernels too
# (tests/test_pretrained.py checks the download code against a local stand-in for the hub).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# pytest-xdist runs one worker per core: a second torch thread in a worker, its notebook kernels or its
# grading workers only fights the other worker for the cores (notebook 10's training cells ran 5-10x slower).
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# `progress` keeps its results between runs (autograder.progress_cache): each test process gets an empty cache
# of its own, never the user's.
os.environ["COURSE_PROGRESS_CACHE"] = tempfile.mkdtemp(prefix="progress-cache-")


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
