"""The collectives: validate locally, pick the algorithm, run it now or put it in flight.

Every collective, blocking or not, goes through :func:`_run`: its record
(:mod:`pyar.collectives`) turns the caller's arrays into the one buffer the
schedule runs on, and this rank's compiled plan (or the MPI library's own
collective for ``algorithm="mpi"``) becomes a :class:`~pyar.runtime.progress.Run`.
A blocking call waits for it (on the runtime's lean paths when nothing
else needs attention: no deadline, no hook, nothing in flight); a
nonblocking one (``iallreduce`` ...) returns it as a :class:`pyar.Request`.
``timeout=`` (else ``PYAR_TIMEOUT``) bounds every wait of a call.

Threads: a call holds its communicator's :attr:`Comm.busy` token, so a call
from another thread on the same communicator meanwhile raises PyarError
(MPI's collectives on one communicator must be called in one order on
every rank, which racing threads cannot keep); different communicators in
different threads run at once (given MPI_THREAD_MULTIPLE; see
:mod:`pyar.runtime.comm`). Requests may be tested and waited for from any thread.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from .algorithms import builder, generation as _generation
from .collectives import Collective, collective as record_of, records
from .collectives.allgather import ALLGATHER
from .collectives.allreduce import ALLREDUCE
from .collectives.alltoall import ALLTOALL
from .collectives.barrier import BARRIER, NOTHING
from .collectives.bcast import BCAST
from .collectives.reduce import REDUCE
from .collectives.reduce_scatter import REDUCE_SCATTER
from .core import ops, schedule as _schedule
from .core.buffers import as_array, as_tensor, is_torch
from .core.errors import PyarError, TimeoutError
from .core.ops import Op
from .model import tuner
from .model.sim import SimResult, simulate
from .runtime import calls, device, notice, progress, recorder
from .runtime.comm import Comm
from .runtime.plan import Plan
from .runtime.progress import Request

__all__ = ["allgather", "allreduce", "alltoall", "barrier", "bcast", "iallgather",
           "iallreduce", "ialltoall", "ibarrier", "ibcast", "ireduce", "ireduce_scatter",
           "reduce", "reduce_scatter", "schedule", "simulate", "SimResult"]

recorder.on_call_path(__file__)     # a call record's caller is outside this module


def allreduce(x, out=None, *, op="sum", algorithm="auto", comm=None, timeout=None):
    """Reduce ``x`` over all ranks of ``comm``; every rank gets the result.

    Args:
        x: numpy (or cupy) array of any shape and a supported dtype (same on every rank).
        out: None for a new array, ``x`` for in place, or an array of x's
            shape and dtype to write.
        op: ``"sum" "prod" "max" "min" "avg"``, an :class:`Op`, or ``MPI.SUM`` etc.
        algorithm: a registered name, ``"mpi"`` or ``"auto"``.
        comm: an mpi4py communicator, a :class:`Comm`, or None (COMM_WORLD).
        timeout: seconds any wait of the call may take (else ``PYAR_TIMEOUT``; unset:
            none); past it, pyar.TimeoutError.

    Returns:
        The reduced array, bitwise identical on every rank.
    """
    if timeout is None:
        global _last
        repeat = _last
        try:                # the last signature again (by identity: a third of a dict lookup)?
            if not (x.dtype is repeat.dtype and op is repeat.op and comm is repeat.comm
                    and algorithm is repeat.algorithm and x.shape == repeat.shape
                    and _generation[0] == repeat.generation
                    and _overrides() == repeat.overrides):
                repeat = _last = _repeats.get((x.dtype, x.shape, id(op), algorithm, id(comm),
                                               _overrides(), _generation[0]), _NO_REPEAT)
        except (AttributeError, TypeError):     # not an array, an unhashable name: checked below
            repeat = _NO_REPEAT
        if repeat is not _NO_REPEAT and type(x) is np.ndarray and progress.hook is None and \
                not progress.OPEN and progress.thread is None:  # (progress.quiet(), inline)
            c = repeat.c
            busy = c.busy
            try:
                busy.pop()                      # (c.enter, inline)
            except IndexError:
                c.enter("pyar.allreduce")      # raises: another thread's call is on c
            deadline = None if c.timeout is None else _monotonic() + c.timeout
            rec = c.recorder
            if rec is not None:                 # the flight recorder's record, inline
                f = _getframe(1)
                entry = [c.seq + 1, repeat.sig, f.f_code, f.f_lasti, _clock(), None, None,
                         algorithm]
                rec.calls.append(entry)
            try:
                bound = repeat.bound            # a call in the arrays bound last: here
                if out is repeat.target and out is not None and (     # (the others: run)
                        x.flags.writeable if out is x       # (MPI would write into it all
                        else out.dtype is x.dtype and out.shape == x.shape):    # the same)
                    fill = x is bound.source    # (the program copies it in)
                    if not fill and out is not x:
                        out[...] = x
                    seq = c.seq = c.seq + 1
                    c.recent[seq % _RECENT] = repeat.entry
                    bound.run(deadline, seq, fill)
                    if repeat.avg:
                        ops.finalize(bound.data, Op.AVG, c.size)
                    done = out
                else:
                    done = repeat.run(x, out, deadline)
            except BaseException as e:          # mid-way: out of step, as calls.build says
                what = f"allreduce #{c.seq} on rank {c.rank} ({x.size} {x.dtype})"
                c.abandon(what, e)
                own = isinstance(e, TimeoutError) and e.failed_rank is None
                if own:                         # (not a peer's, told by a notice)
                    e = e.restated(f"{what}: {e} (PYAR_TIMEOUT; did every rank call it, and "
                                   f"with the same arguments?)")
                if rec is not None:
                    recorder.failed(entry, e)
                if own:
                    raise e from None
                raise
            finally:
                busy.append(True)               # (c.leave)
            if done is not None:
                if rec is not None:
                    entry[5] = _clock()         # (recorder.ENDED)
                return done
            if rec is not None:                 # the full path records it
                rec.calls.pop()
    return _run(ALLREDUCE, x, out, op, algorithm, comm, 0, timeout, False, _remember)


def iallreduce(x, out=None, *, op="sum", algorithm="auto", comm=None, timeout=None) -> Request:
    """:func:`allreduce`, nonblocking: a :class:`pyar.Request` whose result is allreduce's.
    ``x`` must not be written until it is complete."""
    return _run(ALLREDUCE, x, out, op, algorithm, comm, 0, timeout, True)


def reduce_scatter(x, out=None, *, op="sum", algorithm="auto", comm=None, timeout=None):
    """Reduce ``x`` over all ranks; rank r gets block r of the result, flattened.

    The blocks are those ``numpy.array_split(x.ravel(), size)`` cuts. ``out``:
    None for a new array; ``x`` to work in x (overwritten) and get a view of
    its block; or an array of the block's shape ``(n,)`` and x's dtype.
    """
    return _run(REDUCE_SCATTER, x, out, op, algorithm, comm, 0, timeout, False)


def ireduce_scatter(x, out=None, *, op="sum", algorithm="auto", comm=None,
                    timeout=None) -> Request:
    """:func:`reduce_scatter`, nonblocking (a :class:`pyar.Request`)."""
    return _run(REDUCE_SCATTER, x, out, op, algorithm, comm, 0, timeout, True)


def allgather(x, out=None, *, algorithm="auto", comm=None, timeout=None):
    """Gather every rank's ``x`` on every rank: the result has shape ``(size, *x.shape)``.

    Every rank passes the same shape and dtype. ``out``: None for a new array,
    or an array of shape ``(size, *x.shape)`` and x's dtype to write.
    """
    return _run(ALLGATHER, x, out, None, algorithm, comm, 0, timeout, False)


def iallgather(x, out=None, *, algorithm="auto", comm=None, timeout=None) -> Request:
    """:func:`allgather`, nonblocking (a :class:`pyar.Request`)."""
    return _run(ALLGATHER, x, out, None, algorithm, comm, 0, timeout, True)


def reduce(x, out=None, *, root=0, op="sum", algorithm="auto", comm=None, timeout=None):
    """Reduce ``x`` over all ranks onto ``root``; the root gets the result, the others None.

    ``out`` (on the root; ignored elsewhere) as for :func:`allreduce`. The
    input is never modified unless ``out is x``.
    """
    return _run(REDUCE, x, out, op, algorithm, comm, root, timeout, False)


def ireduce(x, out=None, *, root=0, op="sum", algorithm="auto", comm=None,
            timeout=None) -> Request:
    """:func:`reduce`, nonblocking (a :class:`pyar.Request`; its result None off the root)."""
    return _run(REDUCE, x, out, op, algorithm, comm, root, timeout, True)


def bcast(x, *, root=0, algorithm="auto", comm=None, timeout=None):
    """Broadcast the root's ``x`` into every rank's ``x`` (same shape and dtype); returns ``x``."""
    return _run(BCAST, x, x, None, algorithm, comm, root, timeout, False)


def ibcast(x, *, root=0, algorithm="auto", comm=None, timeout=None) -> Request:
    """:func:`bcast`, nonblocking (a :class:`pyar.Request`; x is written when it completes)."""
    return _run(BCAST, x, x, None, algorithm, comm, root, timeout, True)


def alltoall(x, out=None, *, algorithm="auto", comm=None, timeout=None):
    """Exchange blocks: block i of ``x`` (``x[i]``) goes to rank i; result block j came from rank j.

    ``x.shape[0]`` must be the number of ranks. ``out`` as for :func:`allreduce`.
    """
    return _run(ALLTOALL, x, out, None, algorithm, comm, 0, timeout, False)


def ialltoall(x, out=None, *, algorithm="auto", comm=None, timeout=None) -> Request:
    """:func:`alltoall`, nonblocking (a :class:`pyar.Request`)."""
    return _run(ALLTOALL, x, out, None, algorithm, comm, 0, timeout, True)


def barrier(*, algorithm="auto", comm=None, timeout=None) -> None:
    """Return once every rank of ``comm`` has entered the barrier."""
    return _run(BARRIER, NOTHING, None, None, algorithm, comm, 0, timeout, False)


def ibarrier(*, algorithm="auto", comm=None, timeout=None) -> Request:
    """:func:`barrier`, nonblocking: its request completes once every rank has entered."""
    return _run(BARRIER, NOTHING, None, None, algorithm, comm, 0, timeout, True)


def collective(name: str, x, out=None, *, op="sum", root=0, algorithm="auto", comm=None,
               timeout=None, nonblocking=False):
    """Any registered collective by name (one added with ``register_collective`` too), with
    the arguments its record takes; a :class:`pyar.Request` if ``nonblocking``."""
    record = record_of(name)
    if root and not record.rooted:      # (it ran a rooted schedule: data left unreduced)
        rooted = [r.name for r in records() if r.rooted]
        raise ValueError(f"root is for {rooted}, not {name!r}")
    return _run(record, x, out, op if record.reduces else None, algorithm, comm, root,
                timeout, nonblocking)


def _run(record: Collective, x, out, op, algorithm, comm, root, timeout, nonblocking,
         remember=None, then=None):
    """Run ``record``'s collective: validate, pick the algorithm, build the call's run; then
    wait for it (``nonblocking`` False: its result) or put it in flight (its Request).
    ``then(result)`` maps the result, if given (pyar.torch: arrays back to tensors)."""
    if is_torch(x):                        # as arrays sharing the tensors' memory
        return _on_tensors(record, x, out, op, algorithm, comm, root, timeout, nonblocking)
    c = Comm.of(comm)
    c.enter(f"pyar.{record.name}")         # (another thread's call: an error)
    try:
        if not isinstance(x, np.ndarray):  # cupy: pyar.runtime.device
            return device.collective(record, x, out, op, algorithm, comm, root, timeout,
                                     nonblocking, then)
        try:
            run, lean = calls.build(record, x, out, op, algorithm, comm, root, timeout,
                                    nonblocking, remember, then)
            if nonblocking:
                return progress.start(run)
            return lean() if lean is not None else run.complete()
        except PyarError as e:      # (a run's own failure has been recorded already)
            recorder.failed(None, e)
            raise
    finally:
        c.leave()


def _on_tensors(record, x, out, op, algorithm, comm, root, timeout, nonblocking):
    """``record``'s collective on torch tensors, through arrays sharing their memory
    (:func:`pyar.core.buffers.as_array`); the result is ``out`` itself when given, else a
    tensor sharing the result array's memory."""
    a = as_array(x)
    target = a if out is x else None if out is None else as_array(out)

    def back(result):
        if result is None:
            return None
        if result is target:
            return out
        if result is a:
            return x
        return as_tensor(result)

    return _run(record, a, target, op, algorithm, comm, root, timeout, nonblocking, then=back)


def _remember(x, op, algorithm, comm, c: Comm, plan, reduction, resolved, call,
              entry) -> None:
    """Keep a checked allreduce signature for :class:`_Repeat` (after its first lean call; not
    the MPI library's, which must take the same path on every rank, nor on a Comm that checks
    every call, nor on one made unusable meanwhile: a peer's failure heard while this call
    still completed)."""
    if plan is None or c.check or c.broken is not None:
        return
    if len(_repeats) >= _REPEATS_KEPT:
        _repeats.clear()
    plan = plan.base                # not its out-of-place variant
    repeat = _Repeat(op, algorithm, comm, c, plan, x, reduction, resolved is Op.AVG, call,
                     None if entry is None else entry[recorder.SIG])
    _repeats[x.dtype, x.shape, id(op), algorithm, id(comm), repeat.overrides,
             repeat.generation] = repeat            # (allreduce's key)


class _Repeat:
    """An allreduce signature (dtype, shape, op, algorithm, comm, overrides) already checked
    once: a call repeating it skips the checks and lookups (a small message's time is mostly
    Python); a call repeating the last one found skips the lookup too (identity checks).
    The op and comm objects are held, so that their ids cannot be reused, until the
    communicator is freed or made unusable (:func:`_forget`).

    A plan of up to RESIDENT_BYTES runs on a :class:`Resident`: the plan's own buffer (x
    copied in, the result out), or, once the same ``out`` array comes twice in a row, one
    bound to that array itself, as MPI's persistent collectives bind theirs (x copied in,
    or nothing when in place); out of place, bound to that call's x too (when contiguous
    and apart from out), which the native program then copies itself while the same x
    comes. The bound arrays are held until others are bound. A larger one out of place
    runs the plan's out-of-place variant, which reads x itself.
    Only the lean paths: anything else (a deadline, a hook, requests in flight) takes the
    full path.
    """

    __slots__ = ("op", "comm", "c", "plan", "reduction", "avg", "resident", "shaped",
                 "last", "bound", "target", "call", "entry", "sig", "dtype", "shape",
                 "algorithm", "overrides", "generation")

    def __init__(self, op, algorithm, comm, c: Comm, plan: Plan, x, reduction: str,
                 avg: bool, call, sig=None):
        self.op, self.algorithm, self.comm, self.c, self.plan = op, algorithm, comm, c, plan
        self.dtype, self.shape, self.overrides, self.generation = \
            x.dtype, x.shape, _overrides(), _generation[0]      # (allreduce's checks)
        self.sig = sig              # the call's fingerprint, for the flight recorder
        self.reduction, self.avg = reduction, avg
        self.call = call            # as calls.build made it; and Comm.recent's entry of it
        self.entry = (notice.fingerprint(call), call)
        self.resident = plan.resident(c.mpi, x.dtype, reduction, call)
        self.shaped = None if self.resident is None else self.resident.data.reshape(x.shape)
        self.last = self.bound = self.target = None

    def run(self, x, out, deadline=None):
        """The result, or None when ``out`` is not the simple case (then the full path runs);
        with a ``deadline``, a large call takes the full path too (its waits poll). (A call
        in the arrays bound last, the hot path, runs in :func:`allreduce` itself.)"""
        shaped = self.shaped
        if shaped is not None:
            if out is not None:
                if not _writable_like(out, x):
                    return None
                if out is self.last and out.flags.c_contiguous:
                    self._bind(out, x)  # (the calls after this one run in them)
                else:
                    self.last = out
            shaped[...] = x
            c = self.c
            seq = c.seq = c.seq + 1
            c.recent[seq % _RECENT] = self.entry
            self.resident.run(deadline, seq)
            if self.avg:
                ops.finalize(self.resident.data, Op.AVG, self.c.size)
            if out is None:
                return shaped.copy()
            out[...] = shaped
            return out
        if deadline is not None:
            return None
        if out is x:
            flags = x.flags
            if not (flags.c_contiguous and flags.writeable):
                return None
            result = x
        elif not x.flags.c_contiguous:
            return None                 # the full path copies it first
        elif out is None:
            result = np.empty(x.shape, x.dtype)
        else:
            if not _writable_like(out, x) or not out.flags.c_contiguous \
                    or np.may_share_memory(x, out):
                return None
            result = out
        data = result.reshape(-1)
        c = self.c
        tag = c.next_tag(self.entry)
        if result is x:
            self.plan.run(c.mpi, tag, data, self.reduction, None, self.call, c.seq)
        else:
            self.plan.out_of_place().run(c.mpi, tag, data, self.reduction, x.reshape(-1),
                                         self.call, c.seq)
        if self.avg:
            ops.finalize(data, Op.AVG, c.size)
        return result

    def _bind(self, out, x) -> None:
        """Run the next calls in ``out``'s own memory, and from ``x``'s where they can (the
        previous binding is freed)."""
        if self.bound is not None:
            self.bound.free()
        source = x is not out and x.flags.c_contiguous and not np.may_share_memory(x, out)
        self.bound = self.plan.bind(self.c.mpi, out.reshape(-1), self.reduction, self.call,
                                    x if source else None)
        self.target, self.last = out, None


def _writable_like(out, x) -> bool:
    """Whether ``out`` is ``x`` or a numpy array of its shape and dtype, and writeable."""
    return (out is x or type(out) is np.ndarray and out.shape == x.shape
            and out.dtype == x.dtype) and out.flags.writeable


_repeats: dict = {}
_REPEATS_KEPT = 256
_NO_REPEAT = _Repeat.__new__(_Repeat)      # matches no call
_NO_REPEAT.dtype = _NO_REPEAT.op = None
_last = _NO_REPEAT          # the signature found last (a call repeating it skips the lookup)
_overrides = tuner.overrides
_RECENT = notice.RECENT
_monotonic = time.monotonic
_clock = recorder.clock
_getframe = sys._getframe


def _forget(c: Comm) -> None:
    """Drop the remembered signatures of ``c`` (freed, or unusable)."""
    global _last
    for key in [k for k, repeat in _repeats.items() if repeat.c is c]:
        del _repeats[key]
    _last = _NO_REPEAT


Comm.on_retire.append(_forget)


def schedule(algorithm: str, size: int, count: int, *, collective: str = "allreduce",
             topology=None, root: int = 0) -> _schedule.Schedule:
    """The schedule of ``algorithm`` for ``size`` ranks and a ``count``-element buffer (memoised).

    ``count`` is the size of the buffer the schedule runs on (see
    :mod:`pyar.collectives`: ``N * x.size`` for allgather); ``root`` is for
    reduce and bcast; ``topology`` a :class:`pyar.Topology` of ``size`` ranks.
    """
    if root and not record_of(collective).rooted:
        rooted = [r.name for r in records() if r.rooted]
        raise ValueError(f"root is for {rooted}, not {collective!r}")
    return _schedule.build(collective, algorithm, size, count, builder(algorithm, collective),
                           topology, root)
