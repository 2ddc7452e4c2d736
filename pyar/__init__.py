"""pyar: Allreduce and its sibling collectives as explicit point-to-point schedules over MPI."""

__version__ = "0.1.0"

from .algorithms import algorithms, register_algorithm
from .api import (allgather, allreduce, alltoall, barrier, bcast, reduce, reduce_scatter,
                  schedule, simulate)
from .comm import Comm
from .errors import MismatchError, PyarError, ScheduleError, TimeoutError
from .ops import Op
from .topology import Topology

__all__ = [
    "Comm", "MismatchError", "Op", "PyarError", "ScheduleError", "TimeoutError", "Topology",
    "algorithms", "allgather", "allreduce", "alltoall", "barrier", "bcast", "reduce",
    "reduce_scatter", "register_algorithm", "schedule", "simulate",
]
