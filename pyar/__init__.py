"""pyar: Allreduce and its sibling collectives as explicit point-to-point schedules over MPI.

The package is layered (``docs/architecture.md``): ``kernels`` < ``core`` < ``collectives``
< ``algorithms`` < ``model`` < ``runtime`` < ``api`` < ``observe`` < ``integrations``,
``verify`` < ``cli``; imports only go down. This module gathers the public names.
"""

__version__ = "0.1.0"

import importlib

from .algorithms import algorithms, register_algorithm
from .algorithms.msccl import load_algorithm
from .api import (Persistent, allgather, allgather_init, allreduce, allreduce_init, alltoall,
                  alltoall_init, barrier, barrier_init, bcast, bcast_init, collective,
                  iallgather, iallreduce, ialltoall, ibarrier, ibcast, ireduce,
                  ireduce_scatter, reduce, reduce_init, reduce_scatter, reduce_scatter_init,
                  schedule, simulate, simulate_contributions, start_all)
from .collectives import Collective, register_collective
from .core.errors import MismatchError, PyarError, ScheduleError, TimeoutError
from .core.ops import Op
from .core.topology import Topology
from .integrations import compression
from .integrations.buckets import GradientBuckets
from .observe import log as _log, trace as _trace  # noqa: F401  (they attach to every Comm)
from .runtime import progress as _progress
from .runtime.comm import Comm
from .runtime.progress import Progress, Request, test_any, wait_all
from .runtime.recorder import dump

_progress.from_environment()        # PYAR_PROGRESS_THREAD=1: the thread starts now


def __getattr__(name: str):
    """``pyar.torch`` on first use after ``import pyar`` (importing it imports torch, seconds,
    so ``import pyar`` does not): an ImportError naming the ``torch`` extra without torch."""
    if name == "torch":
        return importlib.import_module(".torch", __name__)     # (pyar/torch.py, lazily)
    raise AttributeError(f"module 'pyar' has no attribute {name!r}")


__all__ = [
    "Collective", "Comm", "GradientBuckets", "MismatchError", "Op", "Persistent", "Progress",
    "PyarError", "Request", "ScheduleError", "TimeoutError", "Topology", "algorithms",
    "allgather", "allgather_init", "allreduce", "allreduce_init", "alltoall", "alltoall_init",
    "barrier", "barrier_init", "bcast", "bcast_init", "collective", "compression", "dump",
    "iallgather", "iallreduce", "ialltoall", "ibarrier", "ibcast", "ireduce", "ireduce_scatter",
    "load_algorithm",
    "reduce", "reduce_init", "reduce_scatter", "reduce_scatter_init", "register_algorithm",
    "register_collective", "schedule", "simulate", "simulate_contributions", "start_all",
    "test_any", "wait_all",
]
