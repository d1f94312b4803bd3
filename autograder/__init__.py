"""Checks, a sandboxed runner and nbgrader integration for the Transformer course."""

from autograder.feedback import check

__all__ = ["check"]
