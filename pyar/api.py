"""The collectives: validate locally, pick the algorithm, execute."""

from __future__ import annotations

from . import buffers, ops, schedule as _schedule, tuner
from .algorithms import LIBRARY, builder
from .comm import Comm
from .executors.mpi import Plan, library_allreduce
from .executors.sim import SimResult, simulate

__all__ = ["allreduce", "schedule", "simulate", "SimResult"]


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
    op = ops.resolve(op)
    work = buffers.prepare(x, out)
    data = work.data
    ops.check(op, data.dtype)
    c = Comm.of(comm)
    name = tuner.select("allreduce", algorithm, c.size, data.size, data.nbytes)
    if name == LIBRARY:
        library_allreduce(c.mpi, data, op.reduction)
    else:
        _plan(c, "allreduce", name, data.size).run(c.mpi, c.next_tag(), data, op.reduction)
    ops.finalize(data, op, c.size)
    return work.finish()


def _plan(c: Comm, collective: str, name: str, count: int) -> Plan:
    """This rank's compiled plan, cached on the Comm (a re-registered name makes a new one)."""
    build = builder(name, collective)
    key = (collective, name, build, count)
    plan = c.plans.get(key)
    if plan is None:
        schedule = _schedule.build(collective, name, c.size, count, build, c.topology)
        plan = c.remember(key, Plan(schedule, c.rank))
    return plan


def schedule(algorithm: str, size: int, count: int, *, collective: str = "allreduce",
             topology=None) -> _schedule.Schedule:
    """The schedule of ``algorithm`` for ``size`` ranks and ``count`` elements (memoised)."""
    return _schedule.build(collective, algorithm, size, count, builder(algorithm, collective),
                           topology)
