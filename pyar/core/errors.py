"""The exception hierarchy: everything pyar raises on purpose derives from PyarError."""

import builtins


class PyarError(Exception):
    """Base class of pyar's own errors."""


class ScheduleError(PyarError):
    """A schedule is malformed: unmatched or mis-sized messages, a deadlock, a bad chunk."""


class MismatchError(PyarError):
    """Ranks called the same collective with different arguments."""


class TimeoutError(PyarError, builtins.TimeoutError):
    """A collective did not complete within the configured time."""
