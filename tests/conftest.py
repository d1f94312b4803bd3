import pytest
from notebooks import NOTEBOOKS, read, release_path, run_here, solution_path


@pytest.fixture(scope="session")
def solution_namespaces() -> dict:
    """Each solution notebook executed once in this process, by notebook name."""
    return {nb: run_here(read(solution_path(nb)), solution_path(nb).parent) for nb in NOTEBOOKS}


@pytest.fixture(scope="session")
def stub_namespaces() -> dict:
    """Each released (stub) notebook executed once in this process, by notebook name."""
    return {nb: run_here(read(release_path(nb)), release_path(nb).parent) for nb in NOTEBOOKS}

