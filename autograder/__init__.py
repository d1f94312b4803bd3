"""Checks, a sandboxed runner and nbgrader integration for the Transformer course."""

import coursetools  # noqa: F401 - quiets torchao's import-time warnings (coursetools/__init__.py)

__all__ = ["check"]


def __getattr__(name: str):
    # `from autograder import check` (every test cell) imports the checks and torch on first use only, so that
    # commands that need neither (a `progress` whose results are all cached) start at once.
    if name == "check":
        from autograder.feedback import check

        return check
    raise AttributeError(f"module 'autograder' has no attribute {name!r}")
