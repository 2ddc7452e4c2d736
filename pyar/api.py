"""The collectives: blocking, nonblocking and persistent, all run as persistent requests.

Every collective has three forms, as in MPI-4: ``allreduce`` (blocking),
``iallreduce`` (nonblocking: a :class:`pyar.Request`) and ``allreduce_init``
(persistent: a :class:`pyar.Persistent`, started and waited for as often as
needed). All three run the same way (:mod:`pyar.runtime.persistent`): a
request bound to the call's buffers, its plan compiled and agreed on once;
the blocking call starts and waits for the request cached for its
signature, the nonblocking one starts a request of its own. ``timeout=``
(else ``PYAR_TIMEOUT``) bounds every wait of a call. numpy arrays, cupy
arrays (:mod:`pyar.runtime.device`) and torch tensors (through arrays sharing
their memory) are taken alike.

Threads: a call holds its communicator's :attr:`Comm.busy` token (a
persistent request: during its start), so a call from another thread on the
same communicator meanwhile raises PyarError (MPI's collectives on one
communicator must be called in one order on every rank, which racing
threads cannot keep); different communicators in different threads run at
once (given MPI_THREAD_MULTIPLE; see :mod:`pyar.runtime.comm`). Requests may
be tested and waited for from any thread.
"""

from __future__ import annotations

import numpy as np

from .algorithms import builder
from .collectives import Collective, collective as record_of, records
from .collectives.allgather import ALLGATHER
from .collectives.allreduce import ALLREDUCE
from .collectives.alltoall import ALLTOALL
from .collectives.barrier import BARRIER, NOTHING
from .collectives.bcast import BCAST
from .collectives.reduce import REDUCE
from .collectives.reduce_scatter import REDUCE_SCATTER
from .core import exact, ops, schedule as _schedule
from .core.buffers import as_array, as_tensor, check_out, is_torch
from .core.ops import Op
from .model.contributions import simulate_contributions
from .model.sim import SimResult, simulate
from .runtime import device, persistent, recorder, settings
from .runtime.comm import Comm
from .runtime.persistent import Persistent, start_all
from .runtime.progress import Request

__all__ = ["allgather", "allgather_init", "allreduce", "allreduce_init", "alltoall",
           "alltoall_init", "barrier", "barrier_init", "bcast", "bcast_init", "collective",
           "iallgather", "iallreduce", "ialltoall", "ibarrier", "ibcast", "ireduce",
           "ireduce_scatter", "reduce", "reduce_init", "reduce_scatter",
           "reduce_scatter_init", "schedule", "simulate", "simulate_contributions", "start_all",
           "Persistent", "SimResult"]

recorder.on_call_path(__file__)     # a call record's caller is outside this module


def allreduce(x, out=None, *, op="sum", algorithm="auto", comm=None, timeout=None,
              reduce_dtype=None, reproducible=None):
    """Reduce ``x`` over all ranks of ``comm``; every rank gets the result.

    Args:
        x: numpy (or cupy) array, or torch tensor, of any shape and a supported dtype
            (the same on every rank).
        out: None for a new array, ``x`` for in place, or an array of x's shape and
            dtype to write.
        op: ``"sum" "prod" "max" "min" "avg"``, an :class:`Op`, or ``MPI.SUM`` etc.
        algorithm: a registered name, ``"mpi"`` or ``"auto"``.
        comm: an mpi4py communicator, a :class:`Comm`, or None (COMM_WORLD).
        timeout: seconds any wait of the call may take (else ``PYAR_TIMEOUT``; unset:
            none); past it, pyar.TimeoutError.
        reduce_dtype: the dtype the reduction runs in (its messages and folds). None:
            float32 for float16 and bfloat16 under sum, avg and prod (the result rounded
            to x's type once; twice the bytes on the wire), x's dtype otherwise; x's
            dtype itself to fold a half type in the half type (half the bytes, a rounding
            per fold; partial sums may overflow where the result does not). The MPI
            library's collective (``algorithm="mpi"``) reduces half types in float32.
        reproducible: True: a float ``sum`` or ``avg`` whose bits are the same whatever the
            algorithm, the rank count and order, the segment size or the message split
            (:mod:`pyar.core.exact`: two allreduces of ``algorithm`` on integers, 4.5x
            float32's bytes; per element within ``n 2**-63`` of the largest input's
            power of two of the exact sum, plus the result's rounding). None:
            ``PYAR_REPRODUCIBLE``. Integer sums, max and min are reproducible as they
            are; prod and ``reduce_dtype`` are refused with it.

    Returns:
        The reduced array, bitwise identical on every rank.
    """
    if reproduces(reproducible, x, op, reduce_dtype):
        return _exact(x, out, op, algorithm, comm, timeout)
    return _call(ALLREDUCE, x, out, op, algorithm, comm, 0, timeout, reduce_dtype)


def iallreduce(x, out=None, *, op="sum", algorithm="auto", comm=None, timeout=None,
               reduce_dtype=None) -> Request:
    """:func:`allreduce`, nonblocking: a :class:`pyar.Request` whose result is allreduce's.
    ``x`` must not be written until it is complete."""
    return _start(ALLREDUCE, x, out, op, algorithm, comm, 0, timeout, reduce_dtype)


def allreduce_init(x, out=None, *, op="sum", algorithm="auto", comm=None,
                   timeout=None, reduce_dtype=None) -> Persistent:
    """:func:`allreduce`, persistent (MPI_Allreduce_init): a :class:`pyar.Persistent` request
    bound to ``x`` and ``out``, set up now (collective: every rank calls it alike, else
    MismatchError on every rank), then ``start()`` and ``wait()`` as often as needed;
    ``wait()`` returns the result (``out``, or the request's own array)."""
    return _init(ALLREDUCE, x, out, op, algorithm, comm, 0, timeout, reduce_dtype)


def reduce_scatter(x, out=None, *, op="sum", algorithm="auto", comm=None, timeout=None,
              reduce_dtype=None):
    """Reduce ``x`` over all ranks; rank r gets block r of the result, flattened.

    The blocks are those ``numpy.array_split(x.ravel(), size)`` cuts. ``out``:
    None for a new array; ``x`` to work in x (overwritten) and get a view of
    its block; or an array of the block's shape ``(n,)`` and x's dtype.
    """
    return _call(REDUCE_SCATTER, x, out, op, algorithm, comm, 0, timeout, reduce_dtype)


def ireduce_scatter(x, out=None, *, op="sum", algorithm="auto", comm=None,
                    timeout=None, reduce_dtype=None) -> Request:
    """:func:`reduce_scatter`, nonblocking (a :class:`pyar.Request`)."""
    return _start(REDUCE_SCATTER, x, out, op, algorithm, comm, 0, timeout, reduce_dtype)


def reduce_scatter_init(x, out=None, *, op="sum", algorithm="auto", comm=None,
                        timeout=None, reduce_dtype=None) -> Persistent:
    """:func:`reduce_scatter`, persistent (a :class:`pyar.Persistent`; collective)."""
    return _init(REDUCE_SCATTER, x, out, op, algorithm, comm, 0, timeout, reduce_dtype)


def allgather(x, out=None, *, algorithm="auto", comm=None, timeout=None):
    """Gather every rank's ``x`` on every rank: the result has shape ``(size, *x.shape)``.

    Every rank passes the same shape and dtype. ``out``: None for a new array,
    or an array of shape ``(size, *x.shape)`` and x's dtype to write.
    """
    return _call(ALLGATHER, x, out, None, algorithm, comm, 0, timeout)


def iallgather(x, out=None, *, algorithm="auto", comm=None, timeout=None) -> Request:
    """:func:`allgather`, nonblocking (a :class:`pyar.Request`)."""
    return _start(ALLGATHER, x, out, None, algorithm, comm, 0, timeout)


def allgather_init(x, out=None, *, algorithm="auto", comm=None, timeout=None) -> Persistent:
    """:func:`allgather`, persistent (a :class:`pyar.Persistent`; collective)."""
    return _init(ALLGATHER, x, out, None, algorithm, comm, 0, timeout)


def reduce(x, out=None, *, root=0, op="sum", algorithm="auto", comm=None, timeout=None,
           reduce_dtype=None):
    """Reduce ``x`` over all ranks onto ``root``; the root gets the result, the others None.

    ``out`` (on the root; ignored elsewhere) as for :func:`allreduce`. The
    input is never modified unless ``out is x``.
    """
    return _call(REDUCE, x, out, op, algorithm, comm, root, timeout, reduce_dtype)


def ireduce(x, out=None, *, root=0, op="sum", algorithm="auto", comm=None,
            timeout=None, reduce_dtype=None) -> Request:
    """:func:`reduce`, nonblocking (a :class:`pyar.Request`; its result None off the root)."""
    return _start(REDUCE, x, out, op, algorithm, comm, root, timeout, reduce_dtype)


def reduce_init(x, out=None, *, root=0, op="sum", algorithm="auto", comm=None,
                timeout=None, reduce_dtype=None) -> Persistent:
    """:func:`reduce`, persistent (a :class:`pyar.Persistent`; collective)."""
    return _init(REDUCE, x, out, op, algorithm, comm, root, timeout, reduce_dtype)


def bcast(x, *, root=0, algorithm="auto", comm=None, timeout=None):
    """Broadcast the root's ``x`` into every rank's ``x`` (same shape and dtype); returns ``x``."""
    return _call(BCAST, x, x, None, algorithm, comm, root, timeout)


def ibcast(x, *, root=0, algorithm="auto", comm=None, timeout=None) -> Request:
    """:func:`bcast`, nonblocking (a :class:`pyar.Request`; x is written when it completes)."""
    return _start(BCAST, x, x, None, algorithm, comm, root, timeout)


def bcast_init(x, *, root=0, algorithm="auto", comm=None, timeout=None) -> Persistent:
    """:func:`bcast`, persistent (a :class:`pyar.Persistent`; collective)."""
    return _init(BCAST, x, x, None, algorithm, comm, root, timeout)


def alltoall(x, out=None, *, algorithm="auto", comm=None, timeout=None):
    """Exchange blocks: block i of ``x`` (``x[i]``) goes to rank i; result block j came from rank j.

    ``x.shape[0]`` must be the number of ranks. ``out`` as for :func:`allreduce`.
    """
    return _call(ALLTOALL, x, out, None, algorithm, comm, 0, timeout)


def ialltoall(x, out=None, *, algorithm="auto", comm=None, timeout=None) -> Request:
    """:func:`alltoall`, nonblocking (a :class:`pyar.Request`)."""
    return _start(ALLTOALL, x, out, None, algorithm, comm, 0, timeout)


def alltoall_init(x, out=None, *, algorithm="auto", comm=None, timeout=None) -> Persistent:
    """:func:`alltoall`, persistent (a :class:`pyar.Persistent`; collective)."""
    return _init(ALLTOALL, x, out, None, algorithm, comm, 0, timeout)


def barrier(*, algorithm="auto", comm=None, timeout=None) -> None:
    """Return once every rank of ``comm`` has entered the barrier."""
    return _call(BARRIER, NOTHING, None, None, algorithm, comm, 0, timeout)


def ibarrier(*, algorithm="auto", comm=None, timeout=None) -> Request:
    """:func:`barrier`, nonblocking: its request completes once every rank has entered."""
    return _start(BARRIER, NOTHING, None, None, algorithm, comm, 0, timeout)


def barrier_init(*, algorithm="auto", comm=None, timeout=None) -> Persistent:
    """:func:`barrier`, persistent (a :class:`pyar.Persistent`; collective)."""
    return _init(BARRIER, NOTHING, None, None, algorithm, comm, 0, timeout)


def collective(name: str, x, out=None, *, op="sum", root=0, algorithm="auto", comm=None,
               timeout=None, nonblocking=False, reduce_dtype=None):
    """Any registered collective by name (one added with ``register_collective`` too), with
    the arguments its record takes; a :class:`pyar.Request` if ``nonblocking``."""
    record = record_of(name)
    if root and not record.rooted:      # (it ran a rooted schedule: data left unreduced)
        rooted = [r.name for r in records() if r.rooted]
        raise ValueError(f"root is for {rooted}, not {name!r}")
    if reduce_dtype is not None and not record.reduces:
        raise ValueError(f"reduce_dtype is for a reduction, not {name!r}")
    run = _start if nonblocking else _call
    return run(record, x, out, op if record.reduces else None, algorithm, comm, root, timeout,
               reduce_dtype)


def _call(record: Collective, x, out, op, algorithm, comm, root, timeout, reduce_dtype=None):
    """The blocking call: the cached request of a numpy call (:func:`persistent.call`); a
    torch call on arrays sharing its tensors' memory; a cupy call on the device path."""
    if isinstance(x, np.ndarray):
        return persistent.call(record, x, out, op, algorithm, comm, root, timeout,
                               reduce_dtype)
    if is_torch(x):
        a, target, back = _arrays(x, out)
        return back(_call(record, a, target, op, algorithm, comm, root, timeout,
                          reduce_dtype))
    return _on_device(record, x, out, op, algorithm, comm, root, timeout, False, None,
                      reduce_dtype)


def _start(record: Collective, x, out, op, algorithm, comm, root, timeout,
           reduce_dtype=None) -> Request:
    """The nonblocking call: a request of its own, started (:func:`persistent.start_once`)."""
    then = None
    if is_torch(x):
        x, out, then = _arrays(x, out)
    if isinstance(x, np.ndarray):
        return Request(persistent.start_once(record, x, out, op, algorithm, comm, root,
                                             timeout, then, reduce_dtype))
    return Request(_on_device(record, x, out, op, algorithm, comm, root, timeout, True,
                              then, reduce_dtype))


def _init(record: Collective, x, out, op, algorithm, comm, root, timeout,
          reduce_dtype=None) -> Persistent:
    """The persistent request (:class:`pyar.Persistent`; a cupy array's, :mod:`.device`)."""
    then = None
    if is_torch(x):
        x, out, then = _arrays(x, out)
    if isinstance(x, np.ndarray):
        return Persistent(record, x, out, op, algorithm, comm, root, timeout, then,
                          reduce_dtype=reduce_dtype)
    return device.Persistent(record, x, out, op, algorithm, comm, root, timeout, then,
                             reduce_dtype)


def _on_device(record, x, out, op, algorithm, comm, root, timeout, nonblocking, then=None,
               reduce_dtype=None):
    """A call on a cupy array (:func:`pyar.runtime.device.collective`), holding the call
    token of its communicator."""
    c = Comm.of(comm)
    c.enter(f"pyar.{record.name}")
    try:
        return device.collective(record, x, out, op, algorithm, c, root, timeout, nonblocking,
                                 then, reduce_dtype)
    finally:
        c.leave()


def reproduces(asked, x, op, reduce_dtype=None) -> bool:
    """Whether ``allreduce(x, op=op, reproducible=asked)`` runs reproducibly
    (:mod:`pyar.core.exact`): ``asked`` (None: ``PYAR_REPRODUCIBLE``) and a float sum or
    avg; ValueError where it is asked for a float prod, or with ``reduce_dtype``."""
    if asked is None:
        if not settings.current().reproducible:
            return False
        explicit = False
    elif not asked:
        return False
    else:
        explicit = True
    a = as_array(x) if is_torch(x) else x
    if not hasattr(a, "dtype") or not ops.is_float(a.dtype):
        return False            # (integers add exactly already; a bad x: the call's error)
    op = ops.resolve(op)
    if op is Op.MAX or op is Op.MIN:
        return False
    if op is Op.PROD:
        if explicit:
            raise ValueError("reproducible=True is for sum and avg (a float prod rounds in the "
                             "algorithm's order); pass reproducible=False for prod")
        return False
    if reduce_dtype is not None:
        raise ValueError(f"reproducible sums run in integers: reduce_dtype must be None, got "
                         f"{reduce_dtype!r}")
    return True


def _exact(x, out, op, algorithm, comm, timeout):
    """allreduce(reproducible=True): the phases of :func:`pyar.core.exact.reduction`, each
    a blocking allreduce of ``algorithm`` in place, the result written as ``out`` says."""
    if is_torch(x):
        a, target, back = _arrays(x, out)
        return back(_exact(a, target, op, algorithm, comm, timeout))
    if out is not None and out is not x:
        if isinstance(x, np.ndarray):
            check_out(out, x.shape, x.dtype)
        elif out.shape != x.shape or out.dtype != x.dtype:
            raise ValueError(f"out must have x's shape {x.shape} and dtype {x.dtype}, got "
                             f"{out.shape} and {out.dtype}")
    c = Comm.of(comm)
    phases = exact.reduction(x.reshape(-1), c.size if ops.resolve(op) is Op.AVG else 1)
    contribution, reduction = next(phases)
    try:
        while True:
            _call(ALLREDUCE, contribution, contribution, reduction, algorithm, c, 0, timeout)
            contribution, reduction = phases.send(contribution)
    except StopIteration as done:
        result = done.value.reshape(x.shape)
    if out is None:
        return result
    out[...] = result
    return out


def _arrays(x, out):
    """(x, out) as arrays sharing the torch tensors' memory
    (:func:`pyar.core.buffers.as_array`), and the map of a result back: ``out`` itself
    when given, else a tensor sharing the result array's memory."""
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
    return a, target, back


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
