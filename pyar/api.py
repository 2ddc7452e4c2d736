"""The collectives: validate locally, pick the algorithm, execute."""

from __future__ import annotations

from . import buffers, ops, schedule as _schedule, tuner
from .algorithms import LIBRARY, builder
from .comm import Comm
from .errors import MismatchError, ScheduleError
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
    ops.check(op, buffers.check_array(x).dtype)
    c = Comm.of(comm)
    name = tuner.select("allreduce", algorithm, c.size, x.size, x.nbytes)
    work = buffers.prepare(x, out)          # last: it may write out
    data = work.data
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
        plan = c.remember(key, _compile_everywhere(c, collective, name, build, count))
    return plan


def _compile_everywhere(c: Comm, collective, name, build, count) -> Plan:
    """Compile this rank's plan and agree with the other ranks that all of them could.

    A plan is compiled on the first call with its arguments, on every rank
    alike if they call alike, so one small allreduce here turns a builder that
    fails on some ranks, or ranks that disagree on algorithm or count, into an
    error on every rank instead of a hang.
    """
    error = None
    try:
        plan = Plan(_schedule.build(collective, name, c.size, count, build, c.topology), c.rank)
    except Exception as e:      # re-raised below, once the other ranks know
        error = e
    everyone_ok, same_call = c.agree(error is None, f"{collective}/{name}/{count}")
    if error is not None:
        raise error
    if not everyone_ok:
        raise ScheduleError(f"another rank failed to build its {name} {collective} schedule "
                            f"for count {count}; its error says why")
    if not same_call:
        raise MismatchError(f"ranks called {collective} with different algorithms or counts "
                            f"(here: {name}, count {count})")
    return plan


def schedule(algorithm: str, size: int, count: int, *, collective: str = "allreduce",
             topology=None) -> _schedule.Schedule:
    """The schedule of ``algorithm`` for ``size`` ranks and ``count`` elements (memoised)."""
    return _schedule.build(collective, algorithm, size, count, builder(algorithm, collective),
                           topology)
