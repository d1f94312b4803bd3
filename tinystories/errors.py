class RunError(Exception):
    """A user error, reported in one line."""
