"""One call of a collective: validate locally, pick the algorithm, build the call's run.

:func:`build` turns a record (:mod:`pyar.collectives`), the caller's numpy
arrays and arguments into a :class:`~pyar.runtime.progress.Run` of this
rank's compiled plan (cached on the :class:`Comm`, agreed on by every rank
at its first call) or of the MPI library's own collective, or, for a
blocking call that may take the runtime's lean paths, a function making
it. :mod:`pyar.api` waits for the run or puts it in flight; the device path
(:mod:`pyar.runtime.device`) builds its host calls here too.
"""

from __future__ import annotations

import numpy as np

from ..algorithms import LIBRARY, builder
from ..core import buffers, ops, schedule as _schedule
from ..core.errors import MismatchError, ScheduleError
from ..core.ops import Op
from ..model import tuner
from . import notice, progress, recorder
from .baseline import library
from .comm import Comm
from .plan import RESIDENT_BYTES, Plan
from .progress import Run

recorder.on_call_path(__file__)     # a call record's caller is outside this module

def build(record, x, out, op, algorithm, comm, root, timeout, nonblocking, remember=None,
           then=None):
    """(run, lean) of one call on the numpy array ``x``: the :class:`Run`, or for a blocking
    call that may take the runtime's lean paths (no deadline, no hook, nothing in
    flight), None and a no-argument function making the call. ``then(result)`` maps the
    result, if given (the device path's copy back)."""
    buffers.check_array(x)
    given_op = op
    op, c = checked(record, x, op, comm, root)
    timeout = c.timeout if timeout is None else progress.check_timeout(timeout)
    count = record.count(x.size, c.size)
    name = tuner.select(record.name, algorithm, c.size, count, count * x.dtype.itemsize,
                        x.dtype, topology=c.topology)
    reduction = None if op is None else op.reduction
    deadline = progress.deadline_of(timeout)
    call = signature(record, op, x.dtype, count, root, name)
    tag = c.next_tag((notice.fingerprint(call), call))
    what = f"{record.name} #{c.seq} on rank {c.rank} ({name}, {x.size} {x.dtype})"
    entry = None if c.recorder is None and progress.hook is None else recorder.enter(
        c.recorder, c.seq, (record.name, None if op is None else op.value, x.dtype.name,
                            x.size, x.shape, root, name), algorithm)
    direct = (record.direct and name != LIBRARY and x.nbytes > RESIDENT_BYTES
              and x.flags.c_contiguous and buffers.apart(x, out))
    try:
        if c.check:
            c.check_call(call, deadline, what)
        try:        # out's checks: on a first call, agreed with the others (it writes out)
            work, refused = record.prepare(x, out, c.rank, c.size, root, copy=not direct), None
        except (ValueError, TypeError) as e:
            work, refused = None, e
        plan = None if name == LIBRARY else compiled(c, record.name, name, count, root,
                                                     deadline, what, refused, call)
        if refused is not None:
            raise refused
    except BaseException:       # before any message, as every rank learnt (agreed): the
        if c.broken is None:    # call's number is left with no call, alike on every rank
            c.recent[c.seq % notice.RECENT] = (1, None)
        raise
    if direct:
        plan = plan.out_of_place()
    source = x.reshape(-1) if direct else None
    step = library(record, c, x, work, reduction, root) if plan is None else None
    abandon = None

    def finish():
        if entry is not None:
            entry[recorder.ENDED] = recorder.clock()
        if op is Op.AVG and work.reduced is not None:
            ops.finalize(work.reduced, op, c.size)
        result = work.finish()
        return result if then is None else then(result)

    def failed(error):
        if abandon is not None:
            abandon()
        c.abandon(what, error)
        recorder.failed(entry, error)

    if not nonblocking and deadline is None and progress.quiet():
        def lean():
            try:
                if plan is None:
                    step.run(None)
                else:
                    plan.run(c.mpi, tag, work.data, reduction, source, call, c.seq)
            except BaseException as e:
                failed(e)
                raise
            if remember is not None:
                remember(x, given_op, algorithm, comm, c, plan, reduction, op, call, entry)
            return finish()
        return None, lean
    if remember is not None and not nonblocking:     # blocking, with a deadline
        checked_finish = finish

        def finish():
            result = checked_finish()
            remember(x, given_op, algorithm, comm, c, plan, reduction, op, call, entry)
            return result
    if plan is None:
        steps, ctx, done = [step], None, None
    else:
        steps, ctx, done, abandon = plan.execution(c.mpi, tag, work.data, reduction, source,
                                                   not nonblocking, call, c.seq)
    if done is not None:
        end = finish

        def finish():
            done()
            return end()
    return Run(steps, ctx, finish, what, failed, deadline, (entry, c)), None


def checked(record, x, op, comm, root):
    """The local checks of a call on ``x`` (its type and dtype checked already): the op
    resolved (None if the collective does not reduce) and the :class:`Comm`."""
    if record.reduces:
        op = ops.resolve(op)
        ops.check(op, x.dtype)
    c = Comm.of(comm)
    c.notice.receive(True)  # a peer's failure known already raises here
    c.check_usable()
    if record.rooted:
        check_root(root, c.size)
    record.check(x.shape, c.size)
    return op, c


def check_root(root, size):
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        raise ValueError(f"root must be a rank in [0, {size}), got {root!r}")


def signature(record, op, dtype, count: int, root, name: str) -> tuple:
    """A call as the ranks compare it: (collective, op, dtype, count, root, algorithm)."""
    return (record.name, "-" if op is None else op.value, np.dtype(dtype).name, count,
            int(root), name)


def compiled(c: Comm, collective: str, name: str, count: int, root: int, deadline,
             what: str, refused, call: tuple) -> Plan:
    """This rank's compiled plan, cached on the Comm (a re-registered name makes a new one);
    ``refused``: the error this rank's arguments got, ``call`` the call's
    :func:`signature` (a first call agrees on both too)."""
    build = builder(name, collective)
    key = (collective, name, build, count, int(root))
    plan = c.plans.get(key)
    if plan is None:
        plan = _compile_everywhere(c, collective, name, build, count, int(root), deadline,
                                   what or collective, refused, call)
        if refused is None:
            c.remember(key, plan)
    return plan


def _compile_everywhere(c: Comm, collective, name, build, count, root, deadline, what,
                        refused, call) -> Plan | None:
    """Compile this rank's plan and agree with the other ranks that all of them could, and
    that every rank's arguments passed their checks (``refused``: this rank's error).

    A plan is compiled on the first call with its arguments, on every rank
    alike if they call alike, so one small allreduce here turns a builder that
    fails on some ranks, an ``out`` refused on some ranks only, or ranks that
    disagree on op, dtype, algorithm, count or root (the call's ``signature``),
    into an error on every rank instead of a hang (and a rank that does not
    call at all into a TimeoutError on the others, given a deadline). None if
    this rank's arguments were refused.
    """
    error = plan = None
    try:
        plan = Plan(_schedule.build(collective, name, c.size, count, build, c.topology, root),
                    c.rank)
    except Exception as e:      # re-raised below, once the other ranks know
        error = e
    built, first_refused, same_call = c.agree(
        (error is None, c.size if refused is None else c.rank),
        "/".join(map(str, call)), deadline, what)
    if error is not None:
        raise error
    if refused is not None:
        return None             # the caller raises it
    if not built:
        raise ScheduleError(f"another rank failed to build its {name} {collective} schedule "
                            f"for count {count}; its error says why")
    if not same_call:
        raise MismatchError(f"ranks called {collective} with different ops, dtypes, "
                            f"algorithms, counts or roots (here: op {call[1]}, dtype "
                            f"{call[2]}, {name}, count {count}, root {root})")
    if first_refused < c.size:
        raise ValueError(f"{what}: rank {first_refused}'s arguments (its out) were refused "
                         f"there; its error says why")
    return plan


