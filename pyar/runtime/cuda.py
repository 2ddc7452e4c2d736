"""Device buffers and MPI: whether the library is CUDA-aware, and running a plan on device buffers.

CUDA-awareness is decided once per process (:func:`awareness`), by the first
of these that answers:

1. ``PYAR_CUDA_AWARE=0|1`` in the environment (anything else is an error);
2. the MPI 4.1 info key ``mpi_memory_alloc_kinds`` of ``MPI_COMM_WORLD``
   naming a ``cuda`` kind (``cuda:device`` ...): yes;
3. ``MPIX_Query_cuda_support()``, an extension Open MPI and MPICH export
   (built with CUDA or not), looked up with ctypes in the loaded libmpi;
4. ``mpi_memory_alloc_kinds`` without a ``cuda`` kind (the mpich wheel says
   ``mpi,system``): no. An MPI 4.1 library lists only the kinds it was asked
   for at start-up, so this alone is a weak no, which is why 3 comes first;
5. nothing answered: no (set ``PYAR_CUDA_AWARE=1`` to say otherwise).

:func:`execution` gives an :class:`~pyar.runtime.plan.Plan`'s compiled
steps on cupy buffers, for the one step runner (:mod:`.progress`): its
scratch and landing buffers are allocated on the device (once per plan and
dtype, freed with the plan), folds run as CUDA kernels on cupy's current
stream (:mod:`pyar.kernels.device`), and that stream is synchronized before
the first step and after every step, so MPI never reads a buffer a kernel is
still writing. A plan of at most :data:`HOST_BYTES` runs
instead on its Resident in host memory, as a host rank runs it (its messages
within a node go through shared memory, which a device buffer cannot join).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import weakref
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from ..kernels import reduce_into
from .p2p import Context
from .settings import setting

ENV = "PYAR_CUDA_AWARE"
# Device plans up to this size run on the host Resident (two PCIe copies a call): chosen when
# the host's RESIDENT_BYTES was 64 KiB; not measured on a GPU beyond it, so it stays there
HOST_BYTES = 1 << 16
_KINDS_KEY = "mpi_memory_alloc_kinds"


class Awareness(NamedTuple):
    aware: bool
    reason: str          # what decided, e.g. "mpi_memory_alloc_kinds = mpi,system"


@functools.lru_cache(maxsize=None)
def awareness() -> Awareness:
    """Whether the MPI library takes device buffers, and why we think so (decided once)."""
    return detect()


def detect() -> Awareness:
    """Run the probes in the order the module docstring gives (not cached)."""
    forced = setting(ENV)
    if forced is not None:
        return Awareness(forced, f"{ENV}={int(forced)}")
    kinds = alloc_kinds()
    seen = f"{_KINDS_KEY} = {kinds}"
    if kinds is not None and any(k.strip().split(":")[0] == "cuda" for k in kinds.split(",")):
        return Awareness(True, seen)
    query = query_cuda_support()
    if query is not None:
        return Awareness(bool(query), f"MPIX_Query_cuda_support() = {query}"
                                      + (f"; {seen}" if kinds is not None else ""))
    if kinds is not None:
        return Awareness(False, seen)
    return Awareness(False, f"no probe answered (no {_KINDS_KEY}, no MPIX_Query_cuda_support); "
                            f"set {ENV}=1 if the MPI library is CUDA-aware")


def alloc_kinds() -> str | None:
    """MPI_COMM_WORLD's ``mpi_memory_alloc_kinds`` info value (MPI >= 4.1), else None."""
    info = MPI.COMM_WORLD.Get_info()
    try:
        return info.Get(_KINDS_KEY)
    finally:
        info.Free()


def query_cuda_support() -> int | None:
    """``MPIX_Query_cuda_support()`` of the loaded MPI library, or None where it has none."""
    for library in (None, *libmpi_paths()):
        try:
            function = getattr(ctypes.CDLL(library), "MPIX_Query_cuda_support")
        except (OSError, AttributeError):
            continue
        function.restype, function.argtypes = ctypes.c_int, []
        return int(function())
    return None


def libmpi_paths(maps: str = "/proc/self/maps") -> list[str]:
    """Files named ``libmpi*`` mapped into this process (Linux; elsewhere none).

    mpi4py's wheels open libmpi with local symbols, so the extension's symbols
    are found through the library's own handle, not the process's.
    """
    try:
        with open(maps) as f:
            names = {line.split(maxsplit=5)[-1].strip() for line in f if "libmpi" in line}
    except OSError:
        return []
    return sorted(n for n in names if os.path.basename(n).startswith("libmpi"))


# Plan -> {dtype: (scratch, landing)} on the device; entries go with their plan.
_DEVICE_BUFFERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def execution(plan, comm, tag: int, data, reduction, alone: bool = True):
    """(steps, ctx, done, abandon) of one call of ``plan`` (a :class:`~.plan.Plan`) on ``data``,
    a 1-D contiguous cupy array of ``schedule.count`` elements, as :meth:`.plan.Plan.execution`
    gives them for host arrays: device scratch and landing buffers (the plan's, or with
    ``alone`` False of the call's own), folds as CUDA kernels on cupy's current stream,
    which is synchronized now and after every step. A blocking call of a plan of at most
    :data:`HOST_BYTES` runs on its :class:`~.programs.Resident` in host memory, as a host rank
    runs it (its messages may go through shared memory, which MPI does not see)."""
    cupy = sys.modules["cupy"]
    stream = cupy.cuda.get_current_stream()
    if alone:
        dtype = np.dtype(data.dtype)
        resident = (plan.resident(comm, dtype, reduction)
                    if plan.count * dtype.itemsize <= HOST_BYTES else None)
        if resident is not None:
            cupy.asnumpy(data, out=resident.data)       # waits for the stream
            steps, ctx, end, abandon = resident.execution()

            def done():
                end()
                data.set(resident.data)
                stream.synchronize()        # complete on return, as below
            return steps, ctx, done, abandon
        per_dtype = _DEVICE_BUFFERS.setdefault(plan, {})
        found = per_dtype.get(data.dtype)
        if found is None:
            found = per_dtype[data.dtype] = (cupy.empty(plan.scratch_count, data.dtype),
                                             cupy.empty(plan.landing_count, data.dtype))
    else:
        found = (cupy.empty(plan.scratch_count, data.dtype),
                 cupy.empty(plan.landing_count, data.dtype))
    stream.synchronize()

    def fold(dst, src):            # the device kernels, on cupy's current stream
        reduce_into(dst, src, reduction)
    return plan.steps, Context((data, *found, None), comm, tag, fold, stream.synchronize), \
        None, None
