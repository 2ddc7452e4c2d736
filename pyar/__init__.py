"""pyar: Allreduce and its sibling collectives as explicit point-to-point schedules over MPI."""

__version__ = "0.1.0"

from .algorithms import algorithms, register_algorithm
from .api import allreduce, schedule, simulate
from .comm import Comm
from .errors import MismatchError, PyarError, ScheduleError, TimeoutError
from .ops import Op

__all__ = [
    "Comm", "MismatchError", "Op", "PyarError", "ScheduleError", "TimeoutError",
    "algorithms", "allreduce", "register_algorithm", "schedule", "simulate",
]
