"""The collectives on cupy arrays: straight to a CUDA-aware MPI, or staged through pinned host memory.

:mod:`pyar.api` hands every ``x`` that is not a numpy array here; the
arguments and results are the numpy path's (docs/api.md), as cupy arrays. Which
way the data goes is decided once per process
(:func:`pyar.runtime.cuda.awareness`):

- **direct** (the MPI library is CUDA-aware): ``x`` is copied into a fresh
  device buffer, the schedule runs on it (messages leave from and land in GPU
  memory, folds are CUDA kernels on cupy's current stream, the stream is
  synchronized before MPI touches a buffer), and the result is the buffer
  itself or is copied into ``out``. A float16 sum, avg or prod runs in a
  float32 copy (:func:`pyar.core.ops.accumulator`), widened and rounded back
  on the GPU. ``algorithm="mpi"`` hands the device buffer to the library's
  collective.
- **staged** (it is not): ``x`` is copied into a pinned host buffer (reused
  from call to call; the copy waits for the current stream), the host
  collective runs there, folding with the host kernels, and the result is
  copied back to the device. Cost: two PCIe crossings of the whole buffer per
  call, and the folds run on the CPU. A smarter version would cut the buffer
  into segments and pipeline the copies with the messages, and fold on the
  GPU when the message is large enough that the GPU's bandwidth repays
  moving the incoming data back (a few hundred KiB and up): that needs the
  runtime to stage per step, which this module does not do.

Both ways cost one device copy more than the numpy path for ``out=x`` (the
work buffer is always fresh). cupy has no bfloat16, so device data is never
bfloat16; every other dtype pyar reduces works.
"""

from __future__ import annotations

import sys

import numpy as np

from ..algorithms import LIBRARY
from ..collectives import Work
from ..core import ops
from . import calls, cuda, notice, persistent, progress, recorder
from .baseline import library

__all__ = ["collective", "gpu_summary"]

recorder.on_call_path(__file__)     # a call record's caller is outside this module


def collective(record, x, out, op, algorithm, comm, root, timeout, nonblocking, then=None,
               reduce_dtype=None):
    """``record``'s collective on the cupy array ``x`` (arguments as :mod:`pyar.api`'s): its
    result, or if ``nonblocking`` its :class:`~.progress.Run`, in flight. ``then(result)``
    maps the result, if given. The caller holds the communicator's call token."""
    cupy = _cupy_of(x, "x")
    op, c = calls.checked(record, x, op, comm, root)
    target = _target(record, x, out, c, root)
    if not cuda.awareness().aware:
        return _staged(cupy, record, x, target, op, algorithm, c, root, timeout, nonblocking,
                       then, reduce_dtype)
    run = _direct(cupy, record, x, target, op, algorithm, c, root, timeout, nonblocking,
                  reduce_dtype)
    if then is not None:
        finish = run.finish
        run.finish = lambda: then(finish())
    return progress.start(run) if nonblocking else run.complete()


class Persistent(persistent.Persistent):
    """A persistent request on cupy arrays: its arguments checked and agreed on at init, as
    the host request's; each start runs the device call anew (:func:`collective`: its
    device buffers, or its staging through pinned host memory)."""

    def __init__(self, record, x, out, op, algorithm, comm, root, timeout, then=None,
                 reduce_dtype=None):
        _cupy_of(x, "x")
        op, c = calls.checked(record, x, op, comm, root)
        _target(record, x, out, c, root)
        self.c, self.record, self.root, self.op, self.kind = c, record, root, op, "own"
        self.label, self.asked, self.then = f"pyar.{record.name}", algorithm, None
        self.timeout = c.timeout if timeout is None else progress.check_timeout(timeout)
        count = record.count(x.size, c.size)
        name, wire = calls.chosen(record, algorithm, c, count, x.dtype, op, reduce_dtype)
        self.name = name
        self.call = call = calls.signature(record, op, x.dtype, count, root, name, wire)
        self.sig = (record.name, None if op is None else op.value, x.dtype.name, x.size,
                    x.shape, root, name)
        init = (f"{record.name}_init", *call[1:])
        c.enter(self.label)             # (its agreement is a call on c)
        try:
            c.next_tag((notice.fingerprint(init), init))
            deadline = progress.deadline_of(self.timeout)
            if name != LIBRARY:
                calls.compiled(c, record.name, name, count, root, deadline,
                               self._what(c.seq), None, call, True)
            else:
                calls.agreed(c, record.name, name, count, root, deadline, self._what(c.seq),
                             None, call)
        finally:
            c.leave()
        self.x, self.out, self.device_then, self.reduce_dtype = x, out, then, reduce_dtype
        self.state, self.run, self.result, self.engine = persistent.IDLE, None, None, None
        self.numbered = None

    def _start(self, c) -> None:
        self.state = persistent.ACTIVE
        try:
            found = collective(self.record, self.x, self.out, self.op, self.asked, c,
                               self.root, self.timeout, True, self.device_then,
                               self.reduce_dtype)
        except BaseException:
            self.state = persistent.IDLE
            raise
        self.run = found if isinstance(found, progress.Run) else None
        self.result = None if self.run is not None else found


def _cupy_of(x, name):
    """The cupy module if ``x`` is a cupy array of a supported dtype; else TypeError."""
    cupy = sys.modules.get("cupy")
    if cupy is None or not isinstance(x, cupy.ndarray):
        raise TypeError(f"{name} must be a numpy array or a cupy array, got {type(x).__name__}")
    ops.check_dtype(x.dtype)
    return cupy


def _target(record, x, out, c, root):
    """The device array the result is written to, or None for a new one (after checking ``out``;
    a non-root rank of reduce ignores it, as the numpy path does). ``out is x``: x itself,
    or the part of x the result is (reduce_scatter's block; None if x is not contiguous)."""
    shape = record.result_shape(x.shape, c.size, c.rank)
    if record.rooted and record.reduces and c.rank != root:
        return None
    if out is None:
        return None
    if out is x:
        if shape == x.shape:
            return x
        return record.result(x.reshape(-1), x.shape, c.rank, c.size, root) \
            if x.flags.c_contiguous else None
    _cupy_of(out, "out")
    if out.shape != shape or out.dtype != x.dtype:
        raise ValueError(f"out must have shape {shape} and dtype {x.dtype}, got {out.shape} and "
                         f"{out.dtype}")
    return out


def _direct(cupy, record, x, target, op, algorithm, c, root, timeout, nonblocking,
            reduce_dtype):
    """The run of the collective on device buffers, MPI reading and writing GPU memory;
    a reduction in a wider type (:func:`pyar.core.ops.accumulator`) on a copy of x in it."""
    count = record.count(x.size, c.size)
    name, wire = calls.chosen(record, algorithm, c, count, x.dtype, op, reduce_dtype)
    data = record.load(x, c.rank, c.size)
    if data.dtype != wire:
        data = data.astype(wire)
    reduction = None if op is None else op.reduction
    timeout = c.timeout if timeout is None else progress.check_timeout(timeout)
    deadline = progress.deadline_of(timeout)
    stream = cupy.cuda.get_current_stream()
    tag = c.next_tag()
    what = f"{record.name} #{c.seq} on rank {c.rank} ({name}, {x.size} {x.dtype}, device)"
    if name == LIBRARY:
        work = Work(data, record.result(data, x.shape, c.rank, c.size, root), None)
        step = library(record, c, x, work, reduction, root)
        stream.synchronize()        # (the widening of half types, too) before MPI reads it
        steps, ctx, done, abandon = [step], None, None, None
    else:
        plan = calls.compiled(c, record.name, name, count, root, deadline, what, None,
                              calls.signature(record, op, x.dtype, count, root, name, wire))
        steps, ctx, done, abandon = cuda.execution(plan, c.mpi, tag, data, reduction,
                                                   alone=not nonblocking)

    def finish():
        if done is not None:
            done()
        result = record.result(data, x.shape, c.rank, c.size, root)
        if result is None:
            return None
        if op is not None:               # on the 1-D buffer: the kernels take 1-D arrays
            ops.finalize(result if result.ndim == 1 else data, op, c.size)
        if target is None:              # (a reduction in a wider type: rounded once, here)
            if result.dtype != x.dtype:
                return result.astype(x.dtype)
            return result.copy() if result.size != data.size else result
        target[...] = result
        return target

    def failed(error):
        if abandon is not None:
            abandon()
        c.abandon(what, error)

    return progress.Run(steps, ctx, finish, what, failed, deadline)


def _staged(cupy, record, x, target, op, algorithm, c, root, timeout, nonblocking, then,
            reduce_dtype):
    """The run of the host collective on a pinned host copy of ``x``, the result copied back.

    A blocking call reuses one pinned buffer; a nonblocking one has its own."""
    in_place = record.in_place or not record.out_of_place      # the host call works in x
    shapes = [x.shape] + ([] if in_place else [record.result_shape(x.shape, c.size, c.rank)])
    host = _pinned(shapes, x.dtype, fresh=nonblocking)
    source = x if x.flags.c_contiguous else cupy.ascontiguousarray(x)
    cupy.asnumpy(source, out=host[0])          # synchronous: waits for the current stream

    def back(result):
        if result is None:
            return None
        out = cupy.empty(result.shape, result.dtype) if target is None else target
        if out.flags.c_contiguous:
            out.set(result)
        else:
            out[...] = cupy.asarray(result)
        cupy.cuda.get_current_stream().synchronize()   # the pinned buffer is reused next
        return out

    if then is not None:
        copy_back = back

        def back(result):
            return then(copy_back(result))
    request = persistent.Persistent(record, host[0], host[-1], op, algorithm, c, root,
                                    timeout, back, "once" if nonblocking else "staged",
                                    held=True, reduce_dtype=reduce_dtype)
    if not nonblocking:         # a failed call leaves the shared pinned buffer to late peers
        try:
            request._start(c)
            return request.wait()
        except BaseException:
            _POOL[0] = np.empty(0, np.uint8)
            raise
    request._start(c)
    return request.run if request.run is not None else _done(request.result)


def _done(result) -> progress.Run:
    """A run complete already, with ``result``."""
    run = progress.Run([], None, lambda: result, "a complete call")
    run.progress()
    return run


_POOL = [np.empty(0, np.uint8)]      # the pinned host buffer, grown on demand, never shrunk
_ALIGN = 256


def _pinned(shapes, dtype, fresh: bool = False) -> list[np.ndarray]:
    """Contiguous host arrays of ``shapes`` and ``dtype`` in the reused pinned buffer (in a
    pinned buffer of their own if ``fresh``)."""
    import cupyx

    sizes = [int(np.prod(s, dtype=np.int64)) * dtype.itemsize for s in shapes]
    offsets = np.cumsum([0] + [-(-n // _ALIGN) * _ALIGN for n in sizes])
    if fresh:
        pool = cupyx.empty_pinned(int(offsets[-1]), np.uint8)
    else:
        if _POOL[0].nbytes < offsets[-1]:
            _POOL[0] = cupyx.empty_pinned(max(int(offsets[-1]), 2 * _POOL[0].nbytes), np.uint8)
        pool = _POOL[0]
    return [pool[lo:lo + n].view(dtype).reshape(s) for lo, n, s in zip(offsets, sizes, shapes)]


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
