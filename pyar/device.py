"""The collectives on cupy arrays: straight to a CUDA-aware MPI, or staged through pinned host memory.

:mod:`pyar.api` hands every ``x`` that is not a numpy array here; the
arguments and results are the numpy path's (API.md), as cupy arrays. Which
way the data goes is decided once per process
(:func:`pyar.executors.cuda.awareness`):

- **direct** (the MPI library is CUDA-aware): ``x`` is copied into a fresh
  device buffer, the schedule runs on it (messages leave from and land in GPU
  memory, folds are CUDA kernels on cupy's current stream, the stream is
  synchronized before MPI touches a buffer), and the result is the buffer
  itself or is copied into ``out``. ``algorithm="mpi"`` hands the device
  buffer to the library's collective (float16 widened to float32 on the GPU).
- **staged** (it is not): ``x`` is copied into a pinned host buffer (reused
  from call to call; the copy waits for the current stream), the host
  collective runs there, folding with the host kernels, and the result is
  copied back to the device. Cost: two PCIe crossings of the whole buffer per
  call, and the folds run on the CPU. A smarter version would cut the buffer
  into segments and pipeline the copies with the messages, and fold on the
  GPU when the message is large enough that the GPU's bandwidth repays
  moving the incoming data back (a few hundred KiB and up): that needs the
  executor to stage per step, which this module does not do.

Both ways cost one device copy more than the numpy path for ``out=x`` (the
work buffer is always fresh). cupy has no bfloat16, so device data is never
bfloat16; every other dtype pyar reduces works.
"""

from __future__ import annotations

import sys

import numpy as np

from . import api, collectives, ops, tuner
from .algorithms import LIBRARY
from .comm import Comm
from .executors import cuda
from .kernels import HALF

__all__ = ["allgather", "allreduce", "alltoall", "bcast", "gpu_summary", "reduce",
           "reduce_scatter"]


def allreduce(x, out=None, *, op="sum", algorithm="auto", comm=None):
    """:func:`pyar.allreduce` on a cupy array."""
    return _collective("allreduce", x, out, op, algorithm, comm)


def reduce_scatter(x, out=None, *, op="sum", algorithm="auto", comm=None):
    """:func:`pyar.reduce_scatter` on a cupy array."""
    return _collective("reduce_scatter", x, out, op, algorithm, comm)


def allgather(x, out=None, *, algorithm="auto", comm=None):
    """:func:`pyar.allgather` on a cupy array."""
    return _collective("allgather", x, out, None, algorithm, comm)


def reduce(x, out=None, *, root=0, op="sum", algorithm="auto", comm=None):
    """:func:`pyar.reduce` on a cupy array."""
    return _collective("reduce", x, out, op, algorithm, comm, root)


def bcast(x, *, root=0, algorithm="auto", comm=None):
    """:func:`pyar.bcast` on a cupy array (in place)."""
    return _collective("bcast", x, x, None, algorithm, comm, root)


def alltoall(x, out=None, *, algorithm="auto", comm=None):
    """:func:`pyar.alltoall` on a cupy array."""
    return _collective("alltoall", x, out, None, algorithm, comm)


def _collective(collective, x, out, op, algorithm, comm, root=0):
    cupy = _cupy_of(x, "x")
    if op is not None:
        op = ops.resolve(op)
        ops.check(op, x.dtype)
    c = Comm.of(comm)
    if collective in collectives.ROOTED:
        api._check_root(root, c.size)
    if collective == "alltoall":
        collectives.check_alltoall(x.shape, c.size)
    target = _target(collective, x, out, c, root)
    if cuda.awareness().aware:
        return _direct(cupy, collective, x, target, op, algorithm, c, root)
    return _staged(cupy, collective, x, target, op, algorithm, c, root)


def _cupy_of(x, name):
    """The cupy module if ``x`` is a cupy array of a supported dtype; else TypeError."""
    cupy = sys.modules.get("cupy")
    if cupy is None or not isinstance(x, cupy.ndarray):
        raise TypeError(f"{name} must be a numpy array or a cupy array, got {type(x).__name__}")
    ops.check_dtype(x.dtype)
    return cupy


def _target(collective, x, out, c, root):
    """The device array the result is written to, or None for a new one (after checking ``out``;
    a non-root rank of reduce ignores it, as the numpy path does)."""
    if collective == "reduce" and c.rank != root:
        return None
    if collective == "reduce_scatter":
        block = collectives.block(x.size, c.size, c.rank)
        if out is x:
            return x.reshape(-1)[block] if x.flags.c_contiguous else None
        shape = (block.stop - block.start,)
    elif collective == "allgather":
        shape = (c.size, *x.shape)
    else:
        shape = x.shape
    if out is None or out is x:
        return out
    _cupy_of(out, "out")
    if out.shape != shape or out.dtype != x.dtype:
        raise ValueError(f"out must have shape {shape} and dtype {x.dtype}, got {out.shape} and "
                         f"{out.dtype}")
    return out


def _direct(cupy, collective, x, target, op, algorithm, c, root):
    """Run the collective on device buffers, MPI reading and writing GPU memory."""
    count = collectives.data_count(collective, x.size, c.size)
    name = tuner.select(collective, algorithm, c.size, count, count * x.dtype.itemsize, x.dtype,
                        topology=c.topology)
    if collective == "allgather":
        data = cupy.empty(count, x.dtype)
        data[collectives.block(count, c.size, c.rank)] = x.reshape(-1)
    else:
        data = x.copy(order="C").reshape(-1)
    reduction = None if op is None else op.reduction
    if name == LIBRARY:
        _library(cupy, collective, c, data, reduction, root)
    else:
        cuda.run(api._plan(c, collective, name, count, int(root)), c.mpi, c.next_tag(), data,
                 reduction)
    result = collectives.result(collective, data, x.shape, c.rank, c.size, root)
    if result is None:
        return None
    if op is not None:                   # on the 1-D buffer: the kernels take 1-D arrays
        ops.finalize(result if collective == "reduce_scatter" else data, op, c.size)
    if target is None:
        return result.copy() if collective == "reduce_scatter" else result
    target[...] = result
    return target


def _library(cupy, collective, c, data, reduction, root):
    """The MPI library's own collective on the device buffer ``data``."""
    from .executors import mpi as library

    if reduction is not None and data.dtype in HALF:       # MPI reduces no half type
        wide = data.astype(np.float32)
        _library(cupy, collective, c, wide, reduction, root)
        data[...] = wide
        return
    cupy.cuda.get_current_stream().synchronize()
    if collective == "allreduce":
        library.library_allreduce(c.mpi, data, reduction)
    elif collective == "reduce_scatter":
        block = collectives.block(data.size, c.size, c.rank)
        mine = cupy.empty(block.stop - block.start, data.dtype)
        library.library_reduce_scatter(c.mpi, data, mine, reduction)
        data[block] = mine
    elif collective == "allgather":
        library.library_allgather(c.mpi, data)
    elif collective == "reduce":
        library.library_reduce(c.mpi, data, reduction, root)
    elif collective == "bcast":
        library.library_bcast(c.mpi, data, root)
    else:
        library.library_alltoall(c.mpi, data)


def _staged(cupy, collective, x, target, op, algorithm, c, root):
    """Copy ``x`` to pinned host memory, run the host collective there, copy the result back."""
    shapes = [x.shape] + ([(c.size, *x.shape)] if collective == "allgather" else [])
    host = _pinned(shapes, x.dtype)
    source = x if x.flags.c_contiguous else cupy.ascontiguousarray(x)
    cupy.asnumpy(source, out=host[0])          # synchronous: waits for the current stream
    kwargs = {"algorithm": algorithm, "comm": c}
    if op is not None:
        kwargs["op"] = op
    if collective in collectives.ROOTED:
        kwargs["root"] = root
    if collective == "bcast":
        result = api.bcast(host[0], **kwargs)
    else:
        result = getattr(api, collective)(host[0], host[-1], **kwargs)
    if result is None:
        return None
    if target is None:
        target = cupy.empty(result.shape, result.dtype)
    if target.flags.c_contiguous:
        target.set(result)
    else:
        target[...] = cupy.asarray(result)
    cupy.cuda.get_current_stream().synchronize()   # the pinned buffer is reused by the next call
    return target


_POOL = [np.empty(0, np.uint8)]      # the pinned host buffer, grown on demand, never shrunk
_ALIGN = 256


def _pinned(shapes, dtype) -> list[np.ndarray]:
    """Contiguous host arrays of ``shapes`` and ``dtype`` in the reused pinned buffer."""
    sizes = [int(np.prod(s, dtype=np.int64)) * dtype.itemsize for s in shapes]
    offsets = np.cumsum([0] + [-(-n // _ALIGN) * _ALIGN for n in sizes])
    if _POOL[0].nbytes < offsets[-1]:
        import cupyx

        _POOL[0] = cupyx.empty_pinned(max(int(offsets[-1]), 2 * _POOL[0].nbytes), np.uint8)
    return [_POOL[0][lo:lo + n].view(dtype).reshape(s)
            for lo, n, s in zip(offsets, sizes, shapes)]


def gpu_summary() -> str:
    """One line for ``pyar info``: cupy's version and the GPUs it sees, or why there are none."""
    from importlib.util import find_spec

    if find_spec("cupy") is None:
        return "cupy not installed (pip install 'pyar[gpu]'); GPU: not looked for"
    import cupy

    try:
        n = cupy.cuda.runtime.getDeviceCount()
        names = [cupy.cuda.runtime.getDeviceProperties(i)["name"] for i in range(n)]
    except Exception as e:      # no driver, no device: cupy raises its CUDA errors here
        return f"cupy {cupy.__version__}; GPU: none ({type(e).__name__}: {e})"
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    return f"cupy {cupy.__version__}; GPU: {len(names)} ({', '.join(names) or 'none'})"
