"""pyar: Allreduce and its sibling collectives as explicit point-to-point schedules over MPI."""

__version__ = "0.1.0"

from . import compression
from .algorithms import algorithms, register_algorithm
from .api import (allgather, allreduce, alltoall, barrier, bcast, collective, iallgather,
                  iallreduce, ialltoall, ibarrier, ibcast, ireduce, ireduce_scatter, reduce,
                  reduce_scatter, schedule, simulate)
from .buckets import GradientBuckets
from .collectives import Collective, register_collective
from .comm import Comm
from .errors import MismatchError, PyarError, ScheduleError, TimeoutError
from .executors.progress import Progress, Request, test_any, wait_all
from .ops import Op
from .recorder import dump
from .topology import Topology

from .executors import progress as _progress  # noqa: E402  (PYAR_PROGRESS_THREAD=1: started now)
_progress.from_environment()

__all__ = [
    "Collective", "Comm", "GradientBuckets", "MismatchError", "Op", "Progress", "PyarError",
    "Request", "ScheduleError", "TimeoutError", "Topology", "algorithms", "allgather",
    "allreduce", "alltoall", "barrier", "bcast", "collective", "compression", "dump",
    "iallgather", "iallreduce", "ialltoall", "ibarrier", "ibcast", "ireduce", "ireduce_scatter",
    "reduce", "reduce_scatter", "register_algorithm", "register_collective", "schedule",
    "simulate", "test_any", "wait_all",
]
