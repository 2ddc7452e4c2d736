"""The collectives: validate locally, pick the algorithm, execute.

Each collective turns the caller's arrays into the one buffer its schedule
runs on (see :mod:`pyar.collectives`), runs this rank's compiled plan on it,
or the MPI library's own collective for ``algorithm="mpi"``, and hands back
the result the way API.md says.
"""

from __future__ import annotations

import numpy as np

from . import buffers, collectives, device, ops, schedule as _schedule, tuner
from .algorithms import LIBRARY, builder, generation as _generation
from .comm import Comm
from .errors import MismatchError, ScheduleError
from .executors import mpi as library
from .executors.mpi import RESIDENT_BYTES, Plan
from .executors.sim import SimResult, simulate
from .ops import Op

__all__ = ["allgather", "allreduce", "alltoall", "barrier", "bcast", "reduce",
           "reduce_scatter", "schedule", "simulate", "SimResult"]


def allreduce(x, out=None, *, op="sum", algorithm="auto", comm=None):
    """Reduce ``x`` over all ranks of ``comm``; every rank gets the result.

    Args:
        x: numpy array of any shape and a supported dtype (same on every rank).
        out: None for a new array, ``x`` for in place, or an array of x's
            shape and dtype to write.
        op: ``"sum" "prod" "max" "min" "avg"``, an :class:`Op`, or ``MPI.SUM`` etc.
        algorithm: a registered name, ``"mpi"`` or ``"auto"``.
        comm: an mpi4py communicator, a :class:`Comm`, or None (COMM_WORLD).

    Returns:
        The reduced array, bitwise identical on every rank.
    """
    try:
        repeat = _repeats.get((x.dtype, x.shape, id(op), algorithm, id(comm), _overrides(),
                               _generation[0]))
    except (AttributeError, TypeError):     # not an array, an unhashable name: checked below
        repeat = None
    if repeat is not None and repeat.op is op and repeat.comm is comm and type(x) is np.ndarray:
        done = repeat.run(x, out)
        if done is not None:
            return done
    return _allreduce(x, out, op, algorithm, comm)


def _allreduce(x, out, op, algorithm, comm):
    """allreduce with every check; remembers the call's signature for :class:`_Repeat`."""
    if not isinstance(x, np.ndarray):      # cupy: pyar.device
        return device.allreduce(x, out, op=op, algorithm=algorithm, comm=comm)
    given_op, given_comm = op, comm
    op = ops.resolve(op)
    ops.check(op, buffers.check_array(x).dtype)
    c = Comm.of(comm)
    name = tuner.select("allreduce", algorithm, c.size, x.size, x.nbytes, x.dtype,
                        topology=c.topology)
    # large and out of place: the plan reads x itself, no copy of x into the result first
    direct = name != LIBRARY and x.nbytes > RESIDENT_BYTES and buffers.apart(x, out)
    work = buffers.prepare(x, out, copy=not direct)     # last: it may write out
    data = work.data
    plan = None
    if name == LIBRARY:
        library.library_allreduce(c.mpi, data, op.reduction)
    else:
        plan = _plan(c, "allreduce", name, data.size)
        if direct:
            plan.out_of_place().run(c.mpi, c.next_tag(), data, op.reduction, x.reshape(-1))
        else:
            plan.run(c.mpi, c.next_tag(), data, op.reduction)
    ops.finalize(data, op, c.size)
    if len(_repeats) >= _REPEATS_KEPT:
        _repeats.clear()
    _repeats[x.dtype, x.shape, id(given_op), algorithm, id(given_comm), _overrides(),
             _generation[0]] = _Repeat(given_op, given_comm, c, plan, x, op.reduction,
                                       op is Op.AVG)
    return work.finish()


class _Repeat:
    """An allreduce signature (dtype, shape, op, algorithm, comm, overrides) already checked
    once: a call repeating it skips the checks and lookups (a small message's time is mostly
    Python). The op and comm objects are held, so that their ids cannot be reused.

    A small message runs on a :class:`Resident`: the plan's own buffer (x copied in, the
    result out), or, once the same ``out`` array comes twice in a row, one bound to that
    array itself, as MPI's persistent collectives bind theirs (x copied in, or nothing
    when in place). The bound array is held until another one is bound. A large one out
    of place runs the plan's out-of-place variant, which reads x itself.
    """

    __slots__ = ("op", "comm", "c", "plan", "reduction", "avg", "resident", "shaped",
                 "last", "bound", "target")

    def __init__(self, op, comm, c: Comm, plan: Plan | None, x, reduction: str, avg: bool):
        self.op, self.comm, self.c, self.plan = op, comm, c, plan     # plan None: the library's
        self.reduction, self.avg = reduction, avg
        self.resident = None if plan is None else plan.resident(c.mpi, x.dtype, reduction)
        self.shaped = None if self.resident is None else self.resident.data.reshape(x.shape)
        self.last = self.bound = self.target = None

    def run(self, x, out):
        """The result, or None when ``out`` is not the simple case (then the full path runs)."""
        if out is self.target and out is not None:
            if out is x:                # (x's shape and dtype are the signature's)
                if not x.flags.writeable:
                    return None         # MPI would write into it all the same
            else:
                if out.shape != x.shape or out.dtype != x.dtype:
                    return None
                out[...] = x
            self.bound.run()
            if self.avg:
                ops.finalize(self.bound.data, Op.AVG, self.c.size)
            return out
        shaped = self.shaped
        if shaped is not None:
            if out is not None:
                if not _writable_like(out, x):
                    return None
                if out is self.last and out.flags.c_contiguous:
                    return self._bind(out).run(x, out)
                self.last = out
            shaped[...] = x
            self.resident.run()
            if self.avg:
                ops.finalize(self.resident.data, Op.AVG, self.c.size)
            if out is None:
                return shaped.copy()
            out[...] = shaped
            return out
        if out is x:
            flags = x.flags
            if not (flags.c_contiguous and flags.writeable):
                return None
            result = x
        elif out is None:
            result = x.copy() if self.plan is None else np.empty(x.shape, x.dtype)
        else:
            if not _writable_like(out, x) or not out.flags.c_contiguous \
                    or np.may_share_memory(x, out):
                return None
            if self.plan is None:
                out[...] = x
            result = out
        data = result.reshape(-1)
        c = self.c
        if self.plan is None:
            library.library_allreduce(c.mpi, data, self.reduction)
        elif result is x:
            self.plan.run(c.mpi, c.next_tag(), data, self.reduction)
        else:
            self.plan.out_of_place().run(c.mpi, c.next_tag(), data, self.reduction,
                                         x.reshape(-1))
        if self.avg:
            ops.finalize(data, Op.AVG, c.size)
        return result

    def _bind(self, out) -> _Repeat:
        """Run from now on in ``out``'s own memory (the previous binding is freed)."""
        if self.bound is not None:
            self.bound.free()
        self.bound = self.plan.bind(self.c.mpi, out.reshape(-1), self.reduction)
        self.target, self.last = out, None
        return self


def _writable_like(out, x) -> bool:
    """Whether ``out`` is ``x`` or a numpy array of its shape and dtype, and writeable."""
    return (out is x or type(out) is np.ndarray and out.shape == x.shape
            and out.dtype == x.dtype) and out.flags.writeable


_repeats: dict = {}
_REPEATS_KEPT = 256
_overrides = tuner.overrides


def reduce_scatter(x, out=None, *, op="sum", algorithm="auto", comm=None):
    """Reduce ``x`` over all ranks; rank r gets block r of the result, flattened.

    The blocks are those ``numpy.array_split(x.ravel(), size)`` cuts. ``out``:
    None for a new array; ``x`` to work in x (overwritten) and get a view of
    its block; or an array of the block's shape ``(n,)`` and x's dtype.
    """
    if not isinstance(x, np.ndarray):      # cupy: pyar.device
        return device.reduce_scatter(x, out, op=op, algorithm=algorithm, comm=comm)
    op = ops.resolve(op)
    ops.check(op, buffers.check_array(x).dtype)
    c = Comm.of(comm)
    name = tuner.select("reduce_scatter", algorithm, c.size, x.size, x.nbytes, x.dtype,
                        topology=c.topology)
    block = collectives.block(x.size, c.size, c.rank)
    n = block.stop - block.start
    if out is not None and out is not x:
        buffers.check_out(out, (n,), x.dtype, "the block's")
    in_place = out is x and x.flags.c_contiguous
    if in_place and not x.flags.writeable:
        raise ValueError("x is read-only, so it cannot be reduced in place")
    if name == LIBRARY:
        data = np.ascontiguousarray(x).reshape(-1)      # x's own memory when in place
        reduced = np.empty(n, x.dtype)
        library.library_reduce_scatter(c.mpi, data, reduced, op.reduction)
        if in_place:
            data[block] = reduced
    else:
        data = x.reshape(-1) if in_place else np.array(x, order="C").reshape(-1)
        _run(c, "reduce_scatter", name, data, op.reduction)
        reduced = data[block]
    if in_place:
        result = data[block]
    elif out is not None and out is not x:      # (a non-contiguous x can't be worked in)
        out[...] = reduced
        result = out
    else:                   # not a view that keeps the whole work buffer alive
        result = reduced if name == LIBRARY else reduced.copy()
    ops.finalize(result, op, c.size)
    return result


def allgather(x, out=None, *, algorithm="auto", comm=None):
    """Gather every rank's ``x`` on every rank: the result has shape ``(size, *x.shape)``.

    Every rank passes the same shape and dtype. ``out``: None for a new array,
    or an array of shape ``(size, *x.shape)`` and x's dtype to write.
    """
    if not isinstance(x, np.ndarray):      # cupy: pyar.device
        return device.allgather(x, out, algorithm=algorithm, comm=comm)
    buffers.check_array(x)
    c = Comm.of(comm)
    shape = (c.size, *x.shape)
    name = tuner.select("allgather", algorithm, c.size, x.size * c.size, x.nbytes * c.size,
                        x.dtype, topology=c.topology)
    if out is None:
        out = np.empty(shape, x.dtype)
    else:
        buffers.check_out(out, shape, x.dtype, "the gathered")
    direct = out.flags.c_contiguous
    data = out.reshape(-1) if direct else np.empty(out.size, x.dtype)
    data[collectives.block(data.size, c.size, c.rank)] = x.reshape(-1)
    if name == LIBRARY:
        library.library_allgather(c.mpi, data)
    else:
        _run(c, "allgather", name, data, None)
    if not direct:
        out[...] = data.reshape(shape)
    return out


def reduce(x, out=None, *, root=0, op="sum", algorithm="auto", comm=None):
    """Reduce ``x`` over all ranks onto ``root``; the root gets the result, the others None.

    ``out`` (on the root; ignored elsewhere) as for :func:`allreduce`. The
    input is never modified unless ``out is x``.
    """
    if not isinstance(x, np.ndarray):      # cupy: pyar.device
        return device.reduce(x, out, root=root, op=op, algorithm=algorithm, comm=comm)
    op = ops.resolve(op)
    ops.check(op, buffers.check_array(x).dtype)
    c = Comm.of(comm)
    _check_root(root, c.size)
    name = tuner.select("reduce", algorithm, c.size, x.size, x.nbytes, x.dtype,
                        topology=c.topology)
    if c.rank == root:
        work = buffers.prepare(x, out)
        data = work.data
    elif name == LIBRARY:
        data = np.ascontiguousarray(x).reshape(-1)          # only read
    elif out is x and x.flags.c_contiguous and x.flags.writeable:
        data = x.reshape(-1)
    else:
        data = np.array(x, order="C").reshape(-1)           # partial sums land here
    if name == LIBRARY:
        library.library_reduce(c.mpi, data, op.reduction, root)
    else:
        _run(c, "reduce", name, data, op.reduction, root)
    if c.rank != root:
        return None
    ops.finalize(data, op, c.size)
    return work.finish()


def bcast(x, *, root=0, algorithm="auto", comm=None):
    """Broadcast the root's ``x`` into every rank's ``x`` (same shape and dtype); returns ``x``."""
    if not isinstance(x, np.ndarray):      # cupy: pyar.device
        return device.bcast(x, root=root, algorithm=algorithm, comm=comm)
    buffers.check_array(x)
    if not x.flags.writeable:
        raise ValueError("x is read-only; bcast writes the root's data into it")
    c = Comm.of(comm)
    _check_root(root, c.size)
    name = tuner.select("bcast", algorithm, c.size, x.size, x.nbytes, x.dtype,
                        topology=c.topology)
    work = buffers.prepare(x, x)
    if name == LIBRARY:
        library.library_bcast(c.mpi, work.data, root)
    else:
        _run(c, "bcast", name, work.data, None, root)
    return work.finish()


def alltoall(x, out=None, *, algorithm="auto", comm=None):
    """Exchange blocks: block i of ``x`` (``x[i]``) goes to rank i; result block j came from rank j.

    ``x.shape[0]`` must be the number of ranks. ``out`` as for :func:`allreduce`.
    """
    if not isinstance(x, np.ndarray):      # cupy: pyar.device
        return device.alltoall(x, out, algorithm=algorithm, comm=comm)
    buffers.check_array(x)
    c = Comm.of(comm)
    collectives.check_alltoall(x.shape, c.size)
    name = tuner.select("alltoall", algorithm, c.size, x.size, x.nbytes, x.dtype,
                        topology=c.topology)
    work = buffers.prepare(x, out)
    if name == LIBRARY:
        library.library_alltoall(c.mpi, work.data)
    else:
        _run(c, "alltoall", name, work.data, None)
    return work.finish()


_NOTHING = np.empty(0, np.uint8)


def barrier(*, algorithm="auto", comm=None) -> None:
    """Return once every rank of ``comm`` has entered the barrier."""
    c = Comm.of(comm)
    name = tuner.select("barrier", algorithm, c.size, 0, 0, topology=c.topology)
    if name == LIBRARY:
        c.mpi.Barrier()
    else:
        _run(c, "barrier", name, _NOTHING, None)


def _check_root(root, size):
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        raise ValueError(f"root must be a rank in [0, {size}), got {root!r}")


def _run(c: Comm, collective: str, name: str, data, reduction, root: int = 0) -> None:
    """Run this rank's plan of ``name`` on ``data`` (1-D, contiguous)."""
    _plan(c, collective, name, data.size, int(root)).run(c.mpi, c.next_tag(), data, reduction)


def _plan(c: Comm, collective: str, name: str, count: int, root: int = 0) -> Plan:
    """This rank's compiled plan, cached on the Comm (a re-registered name makes a new one)."""
    build = builder(name, collective)
    key = (collective, name, build, count, root)
    plan = c.plans.get(key)
    if plan is None:
        plan = c.remember(key, _compile_everywhere(c, collective, name, build, count, root))
    return plan


def _compile_everywhere(c: Comm, collective, name, build, count, root) -> Plan:
    """Compile this rank's plan and agree with the other ranks that all of them could.

    A plan is compiled on the first call with its arguments, on every rank
    alike if they call alike, so one small allreduce here turns a builder that
    fails on some ranks, or ranks that disagree on algorithm, count or root,
    into an error on every rank instead of a hang.
    """
    error = None
    try:
        plan = Plan(_schedule.build(collective, name, c.size, count, build, c.topology, root),
                    c.rank)
    except Exception as e:      # re-raised below, once the other ranks know
        error = e
    everyone_ok, same_call = c.agree(error is None, f"{collective}/{name}/{count}/{root}")
    if error is not None:
        raise error
    if not everyone_ok:
        raise ScheduleError(f"another rank failed to build its {name} {collective} schedule "
                            f"for count {count}; its error says why")
    if not same_call:
        raise MismatchError(f"ranks called {collective} with different algorithms, counts or "
                            f"roots (here: {name}, count {count}, root {root})")
    return plan


def schedule(algorithm: str, size: int, count: int, *, collective: str = "allreduce",
             topology=None, root: int = 0) -> _schedule.Schedule:
    """The schedule of ``algorithm`` for ``size`` ranks and a ``count``-element buffer (memoised).

    ``count`` is the size of the buffer the schedule runs on (see
    :mod:`pyar.collectives`: ``N * x.size`` for allgather); ``root`` is for
    reduce and bcast; ``topology`` a :class:`pyar.Topology` of ``size`` ranks.
    """
    if root and collective not in collectives.ROOTED:
        raise ValueError(f"root is for {sorted(collectives.ROOTED)}, not {collective!r}")
    return _schedule.build(collective, algorithm, size, count, builder(algorithm, collective),
                           topology, root)
