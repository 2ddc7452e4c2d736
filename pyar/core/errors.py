"""The exception hierarchy: everything pyar raises on purpose derives from PyarError."""

from __future__ import annotations

import builtins
from typing import NamedTuple


class Where(NamedTuple):
    """A step of a rank's plan, as errors name it: ``rank 3 step 2``."""

    rank: int
    step: int

    def __str__(self):
        return f"rank {self.rank} step {self.step}"


class PyarError(Exception):
    """Base class of pyar's own errors.

    Where a wait gave up, the error says so as data as well as in words (None, or ``()``
    for ``peers``, where it cannot say): ``step`` and ``steps`` (the call's step it waited
    in, of how many), ``peers`` (the ranks it waited for) and ``waited`` (seconds). An error
    that stopped this rank because a peer failed has ``failed_rank`` (that peer) and
    ``waiting`` (the error this rank's own wait would have raised, with its data).
    """

    step: int | None = None
    steps: int | None = None
    peers: tuple = ()
    waited: float | None = None
    failed_rank: int | None = None
    waiting: PyarError | None = None

    def __init__(self, message: str = "", *, step=None, steps=None, peers=(), waited=None):
        super().__init__(message)
        self.step, self.steps, self.peers, self.waited = step, steps, tuple(peers), waited

    def restated(self, message: str) -> PyarError:
        """The same error, of the same class and data, with ``message`` for its words."""
        return type(self)(message, step=self.step, steps=self.steps, peers=self.peers,
                          waited=self.waited)


class ScheduleError(PyarError):
    """A schedule is malformed: unmatched or mis-sized messages, a deadlock, a bad chunk."""


class MismatchError(PyarError):
    """Ranks called the same collective with different arguments."""


class TimeoutError(PyarError, builtins.TimeoutError):
    """A collective did not complete within the configured time."""
