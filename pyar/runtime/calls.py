"""What every call of a collective checks first, and the plans the ranks agree on.

:func:`checked` makes a call's local checks; :func:`compiled` gives this
rank's compiled plan, cached on the :class:`Comm` and agreed on by every
rank when it is compiled (or whenever a persistent request is made):
:mod:`.persistent` and the device path (:mod:`.device`) build their calls
on them.
"""

from __future__ import annotations

import numpy as np

from ..algorithms import LIBRARY, builder
from ..core import ops, schedule as _schedule
from ..core.errors import MismatchError, ScheduleError
from ..model import tuner
from . import recorder
from .comm import Comm
from .plan import Plan

recorder.on_call_path(__file__)     # a call record's caller is outside this module


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


def signature(record, op, dtype, count: int, root, name: str, wire=None) -> tuple:
    """A call as the ranks compare it: (collective, op, dtype, count, root, algorithm); the
    dtype reads ``"float16 in float32"`` where the reduction runs in a wider ``wire``."""
    dtype = np.dtype(dtype)
    named = dtype.name if wire is None or wire == dtype else f"{dtype.name} in {wire.name}"
    return (record.name, "-" if op is None else op.value, named, count, int(root), name)


def runs_in(name: str, wire: np.dtype, reduces: bool) -> np.dtype:
    """The dtype algorithm ``name`` runs in, given the one asked for (``wire``): the MPI
    library's collective reduces half types in float32 (MPI has none)."""
    return np.dtype(np.float32) if reduces and name == LIBRARY and wire in ops.HALF else wire


def chosen(record, algorithm, c: Comm, count: int, dtype, op, reduce_dtype) -> tuple:
    """(algorithm name, the dtype it runs in) of a call on ``count`` elements of ``dtype``:
    the tuner's choice for the bytes the call moves in the dtype it asks for
    (:func:`pyar.core.ops.accumulator`), then :func:`runs_in` that algorithm."""
    wire = ops.accumulator(dtype, op, reduce_dtype)
    name = tuner.select(record.name, algorithm, c.size, count, count * wire.itemsize, wire,
                        topology=c.topology)
    return name, runs_in(name, wire, op is not None)


def compiled(c: Comm, collective: str, name: str, count: int, root: int, deadline,
             what: str, refused, call: tuple, agree: bool = False) -> Plan | None:
    """This rank's compiled plan, cached on the Comm (a re-registered name makes a new one);
    ``refused``: the error this rank's arguments got, ``call`` the call's
    :func:`signature`. Compiling it agrees with the other ranks on both
    (:func:`_compile_everywhere`), and so does a cached one with ``agree`` (a persistent
    request's init). None if this rank's arguments were refused."""
    key = (collective, name, builder(name, collective), count, int(root))
    plan = c.plans.get(key)
    if plan is None or agree:
        plan = _compile_everywhere(c, collective, name, key[2], count, int(root), deadline,
                                   what or collective, refused, call, plan)
        if plan is not None:
            c.remember(key, plan)
    return plan


def is_compiled(c: Comm, collective: str, name: str, count: int, root: int) -> bool:
    """Whether this rank's plan for these arguments is compiled (every rank alike, for
    ranks that call alike)."""
    return (collective, name, builder(name, collective), count, int(root)) in c.plans


def agreed(c: Comm, collective, name, count, root, deadline, what, refused, call) -> None:
    """Agree with the other ranks that every rank made this ``call`` and that its arguments
    passed their checks, for a call with no plan (the MPI library's collective)."""
    _compile_everywhere(c, collective, name, None, count, root, deadline, what, refused, call,
                        False)


def _compile_everywhere(c: Comm, collective, name, build, count, root, deadline, what,
                        refused, call, plan=None) -> Plan | None:
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
    error = None
    try:
        if plan is None and build is not None:      # (False: no plan to make; given: made)
            plan = Plan(_schedule.build(collective, name, c.size, count, build, c.topology,
                                        root), c.rank)
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


