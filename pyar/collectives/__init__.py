"""What each collective is: one record per collective, one small module each.

A schedule runs on one buffer, ``data``, of ``count`` elements (see
:mod:`pyar.core.schedule`). A :class:`Collective` record says, for a caller's
``x``: how big ``data`` is and what it holds before the schedule runs
(:meth:`~Collective.prepare`, which also applies the ``out`` rules of
docs/api.md), where the result is afterwards, the MPI library's own call (the
baseline: the API's ``algorithm="mpi"``, the bench and the oracle), the
nccl-tests bus-bandwidth factor, whether it reduces or is rooted, and its
postcondition (:meth:`~Collective.expected`: what every rank must get, from
all ranks' inputs). The API, the device path, the simulator, the bench, the
cost model and the tests loop over these records; adding a collective is
one record (registered with :func:`register_collective`) plus its
algorithms.

=============== ========== ============================== =========================
collective      count      data before                    result
=============== ========== ============================== =========================
allreduce       x.size     x                              data
reduce_scatter  x.size     x                              block ``rank`` of data
allgather       N * x.size x in block ``rank``            data, shape ``(N, *x.shape)``
reduce          x.size     x                              data on the root, else None
bcast           x.size     x (only the root's matters)    data
alltoall        x.size     x (block i for rank i)         data (block j from rank j)
barrier         0          nothing                        None
=============== ========== ============================== =========================

Blocks are those of ``numpy.array_split`` (:func:`pyar.schedule.split`).
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import numpy as np

from .. import kernels
from ..core import buffers
from ..core.schedule import split


class Work(NamedTuple):
    """A call's buffers: ``data`` (1-D, contiguous: what the schedule runs on), ``reduced`` (the
    part of data holding this rank's reduced result, where ``avg`` divides; None if none),
    ``finish()``, which returns the collective's result once the schedule has run, and
    ``load()``, which puts x's contents in data again for another run on the same buffers
    (a persistent request's start; None where data is x's own memory or holds nothing of
    it). A record whose data is a copy of x but gives no ``load`` has no persistent form;
    its blocking calls prepare their buffers anew each call. ``plain``: ``finish()`` only
    returns the result, the same each call (no copy, no rounding), so that a call run
    natively from start to end needs no Python after it."""

    data: np.ndarray
    reduced: np.ndarray | None
    finish: Callable
    load: Callable | None = None
    plain: bool = False


def widened(record, x: np.ndarray, out, rank: int, size: int, root: int, dtype) -> Work:
    """The buffers of ``record``'s reduction of ``x`` run in the wider ``dtype``
    (:func:`pyar.core.ops.accumulator`): a shadow of x in ``dtype``, which ``load()``
    fills (widening x) and the schedule works in, and ``finish()``, which rounds the
    result to x's dtype once, into the buffers ``record`` prepares for ``x`` and
    ``out`` (its ``out`` rules unchanged). Cost: the shadow (x's elements in ``dtype``)
    and a widening and a rounding copy per call."""
    narrow = record.prepare(x, out, rank, size, root, copy=False)
    shadow = np.empty(x.shape, dtype)
    wide = record.prepare(shadow, shadow, rank, size, root)

    def finish():
        wide.finish()
        if narrow.reduced is not None:          # (beyond the half type's range: inf, as IEEE)
            kernels.cast_into(narrow.reduced, wide.reduced)
        return narrow.finish()

    def load():
        kernels.cast_into(shadow.reshape(-1), x.reshape(-1))
    return Work(wide.data, wide.reduced, finish, load)


def block(count: int, size: int, rank: int) -> slice:
    """Block ``rank`` of a buffer of ``count`` elements cut in ``size`` blocks."""
    return slice(*split(count, size)[rank])


class Collective:
    """The record of one collective. Defaults describe a collective whose ``data`` is ``x`` and
    whose result is all of ``data`` in x's shape (allreduce); subclasses say what differs.

    Attributes: ``name``; ``reduces`` (takes ``op``); ``rooted`` (takes ``root``);
    ``in_place`` (``out is x`` works in x's memory); ``out_of_place`` (a result apart
    from x exists: False for bcast); ``blocked`` (nccl-tests' size counts one block per
    rank, and ``count`` a block's elements); ``library_name`` (the MPI call, as
    the bench names it).
    """

    name = ""
    reduces = False
    rooted = False
    in_place = True
    out_of_place = True
    blocked = False
    library_name = ""

    def factor(self, size: int) -> float:
        """nccl-tests' bus bandwidth over algorithm bandwidth at ``size`` ranks."""
        raise NotImplementedError

    def count(self, x_size: int, size: int) -> int:
        """Elements of ``data`` for an ``x`` of ``x_size`` elements on ``size`` ranks."""
        return x_size

    def x_size(self, count: int, size: int) -> int:
        """Elements of each rank's ``x`` for a ``data`` buffer of ``count`` (the inverse of
        :meth:`count`)."""
        return count

    def check(self, shape, size: int) -> None:
        """ValueError unless an ``x`` of ``shape`` suits this collective on ``size`` ranks."""

    def direct(self, count: int, size: int, rank: int, root: int):
        """Whether a large call apart from x may run the plan's out-of-place variant, which
        reads x itself instead of a copy of it in data: (the part of data that x is before
        the schedule, the part of data that is the result after it) as slices of data's
        ``count`` elements; None where it may not (the default)."""
        return None

    def result_shape(self, shape, size: int, rank: int):
        """The shape of the result on ``rank`` for an ``x`` of ``shape``."""
        return tuple(shape)

    def load(self, x, rank: int, size: int):
        """A new ``data`` buffer (of x's array type) holding what ``x`` contributes."""
        return x.copy(order="C").reshape(-1)

    def result(self, data, shape, rank: int, size: int, root: int):
        """What the collective returns on ``rank``, given its ``data`` after the schedule ran
        (a view of data, or None)."""
        return data.reshape(shape)

    def prepare(self, x: np.ndarray, out, rank: int, size: int, root: int,
                copy: bool = True) -> Work:
        """The buffers of a call on the numpy array ``x`` with ``out`` (docs/api.md's rules: None a
        new array, ``x`` in place, else an array of the result's shape and dtype); with
        ``copy`` False, data need not hold x (the plan's out-of-place variant reads x)."""
        work = buffers.prepare(x, out, copy)
        return Work(work.data, work.data, work.finish, work.load, work.writeback is None)

    def library(self, comm, x, out, reduction, root: int, start: bool = False):
        """The MPI library's own collective from ``x`` into ``out`` (contiguous arrays of the
        collective's input and result shapes; ``out is x``: in place), on mpi4py
        communicator ``comm``; with ``start``, its nonblocking form's request. The built-in
        collectives' calls are :mod:`pyar.runtime.baseline`'s; a collective registered
        with :func:`register_collective` defines this or :meth:`library_call`."""
        return self.library_call(comm, x, out, reduction, root, start)()

    def library_call(self, comm, x, out, reduction, root: int, start: bool = False):
        """:meth:`library` as a callable of no arguments (its buffers, datatypes and op
        resolved beforehand where the collective says how)."""
        if type(self).library is Collective.library:
            raise NotImplementedError(f"collective {self.name!r} defines neither library() "
                                      f"nor library_call(): the MPI library's own call")
        return partial(self.library, comm, x, out, reduction, root, start)

    def library_buffers(self, x, work: Work, rank: int, root: int):
        """(send, receive, after) of :meth:`library` for a call whose buffers are ``work``
        (``after()``, if not None, runs once it is complete); default: in place on data."""
        return work.data, work.data, None

    def expected(self, inputs: list, rank: int, root: int, op):
        """The postcondition: what ``rank`` must get when rank r passed ``inputs[r]``, and for
        a reduction the scale its rounding error is relative to (:mod:`pyar.verify`);
        ``(None, None)`` where the collective returns None."""
        raise NotImplementedError

    def shapes(self, size: int, count: int):
        """The bench's (x shape, result shape) for ``count`` elements (a block's if blocked)."""
        return (count,), (count,)

    def __repr__(self):
        return f"<collective {self.name}>"


_records: dict[str, Collective] = {}


def register_collective(record: Collective) -> Collective:
    """Make ``record`` a collective everywhere (api, sim, bench, verify, the registry of
    algorithms); registering a name again replaces it."""
    if not isinstance(record, Collective) or not str(record.name).isidentifier():
        raise TypeError(f"register_collective needs a Collective with a name, got {record!r}")
    _records[record.name] = record
    return record


def collective(name: str) -> Collective:
    """The record of ``name``; ValueError listing the collectives otherwise."""
    try:
        return _records[name]
    except (KeyError, TypeError):
        raise ValueError(f"collective must be one of {', '.join(_records)}, got {name!r}") \
            from None


def names() -> tuple[str, ...]:
    """The collectives, in the order they were registered."""
    return tuple(_records)


def records() -> list[Collective]:
    return list(_records.values())


# The built-in collectives register themselves on import, in this order (names() keeps it).
# isort: off
from . import allreduce, reduce_scatter, allgather, reduce, bcast, alltoall, barrier  # noqa
# isort: on
