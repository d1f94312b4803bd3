"""The one kind of error the program reports to a user as a single line (``error: ...``, exit 2)."""


class RunError(Exception):
    """A user-facing problem (bad config, missing data, unusable checkpoint): str is one line."""
