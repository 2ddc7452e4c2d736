"""The MPI library's own collectives: the baseline pyar is measured and checked against.

``algorithm="mpi"`` runs them as one step of a call (:class:`Library`), the
bench times them beside pyar's algorithms, and the oracles take their
results as the reference. :func:`library_call` gives a collective's MPI call
with its buffers, datatypes and op bound beforehand: the bare mpi4py call
(``comm.Allreduce(...)``), what the bench times. Reductions pass the
element type (:func:`typed`), so the library reduces with its own op; data
movement passes bytes (:func:`as_bytes`), so any dtype works. MPI has no
float16 or bfloat16: a call reduces those in float32
(:func:`pyar.runtime.calls.runs_in`), so they never reach the library.

A collective that is not built in brings its own call
(:meth:`pyar.collectives.Collective.library`).
"""

from __future__ import annotations

from functools import partial

import numpy as np
from mpi4py import MPI

from ..collectives import Collective, block
from ..collectives.allgather import Allgather
from ..collectives.allreduce import Allreduce
from ..collectives.alltoall import Alltoall
from ..collectives.barrier import Barrier
from ..collectives.bcast import Bcast
from ..collectives.reduce import Reduce
from ..collectives.reduce_scatter import ReduceScatter
from .progress import Step

IN_PLACE, BYTE = MPI.IN_PLACE, MPI.BYTE
_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}


def library_op(reduction: str) -> MPI.Op:
    """MPI's predefined op for a reduction named ``sum prod max min``."""
    return _OPS[reduction]


def typed(data: np.ndarray):
    """``data`` as an MPI buffer of its own element type (for the library's reductions)."""
    return [data, MPI.Datatype.fromcode(data.dtype.char)]


def as_bytes(data: np.ndarray):
    """``data`` as MPI_BYTEs (for the library's data movement: any dtype)."""
    return [data, data.nbytes, BYTE]


def _form(comm, name: str, start):
    """The mpi4py call ``name`` (``"Allreduce"``) in its blocking form (``start`` False), its
    nonblocking one (True: ``Iallreduce``) or its persistent one (``"init"``:
    ``Allreduce_init``, MPI-4)."""
    if start == "init":
        return getattr(comm, f"{name}_init")
    return getattr(comm, f"I{name[0].lower()}{name[1:]}" if start else name)


def _allreduce(comm, x, out, reduction, root, start):
    return partial(_form(comm, "Allreduce", start), IN_PLACE if out is x else typed(x),
                   typed(out), library_op(reduction))


def _reduce_scatter(comm, x, out, reduction, root, start):
    size = comm.Get_size()
    counts = [b.stop - b.start for b in (block(x.size, size, r) for r in range(size))]
    return partial(_form(comm, "Reduce_scatter", start), typed(x), typed(out), counts,
                   library_op(reduction))


def _allgather(comm, x, out, reduction, root, start):
    return partial(_form(comm, "Allgather", start), as_bytes(x), [out, x.nbytes, BYTE])


def _reduce(comm, x, out, reduction, root, start):
    call = _form(comm, "Reduce", start)
    if comm.Get_rank() != root:
        return partial(call, typed(x), None, library_op(reduction), root)
    return partial(call, IN_PLACE if out is x else typed(x), typed(out),
                   library_op(reduction), root)


def _bcast(comm, x, out, reduction, root, start):
    return partial(_form(comm, "Bcast", start), as_bytes(x), root)


def _alltoall(comm, x, out, reduction, root, start):
    n = out.nbytes // comm.Get_size()
    return partial(_form(comm, "Alltoall", start),
                   IN_PLACE if out is x else [x, n, BYTE], [out, n, BYTE])


def _barrier(comm, x, out, reduction, root, start):
    return _form(comm, "Barrier", start)


_CALLS = {Allreduce: _allreduce, ReduceScatter: _reduce_scatter, Allgather: _allgather,
          Reduce: _reduce, Bcast: _bcast, Alltoall: _alltoall, Barrier: _barrier}


def built_in(record: Collective) -> bool:
    """Whether ``record``'s MPI call is one of this module's (it has a persistent form)."""
    return type(record) in _CALLS


def library_call(record: Collective, comm: MPI.Comm, x, out, reduction, root: int = 0,
                 start=False):
    """The MPI library's own ``record`` collective from ``x`` into ``out`` (contiguous arrays
    of the collective's input and result shapes; ``out is x``: in place) on mpi4py
    communicator ``comm``, as a callable of no arguments; with ``start`` True, calling it
    starts the nonblocking form and returns its request; with ``"init"`` (a built-in
    collective only), it makes the persistent request (MPI-4: collective). A built-in
    collective's is the bare mpi4py call with its arguments bound; another's, its
    record's :meth:`~pyar.collectives.Collective.library_call`."""
    call = _CALLS.get(type(record))
    if call is None:
        if start == "init":
            raise TypeError(f"collective {record.name!r} has no persistent MPI call")
        return record.library_call(comm, x, out, reduction, root, start)
    return call(comm, x, out, reduction, root, start)


class Library(Step):
    """The MPI library's own collective (algorithm ``mpi``) as one step of a call, in its
    nonblocking or persistent form (every rank must call the same form, and whether a rank
    blocks depends on what it has in flight): ``call()`` starts it and gives its request;
    ``after()``, if given, runs once it is complete."""

    __slots__ = ("call", "after", "request")
    where = "the MPI library's collective"

    def __init__(self, call, after=None):
        self.call, self.after, self.request = call, after, None

    def start(self, ctx):
        self.request = self.call()

    def test(self, ctx):
        return self.request.Test()

    def finish(self, ctx):
        if self.after is not None:
            self.after()


class PersistentLibrary(Library):
    """:class:`Library` in the persistent form: the MPI library's ``MPI_Allreduce_init`` (and
    siblings') request, made once (collective) and started at each :meth:`start`."""

    __slots__ = ("persistent",)

    def __init__(self, persistent, after=None):
        super().__init__(self._start, after)
        self.persistent = persistent

    def _start(self):
        self.persistent.Start()
        return self.persistent

    def free(self) -> None:
        """Free the MPI request (idempotent)."""
        if self.persistent and not MPI.Is_finalized():
            self.persistent.Free()


def library(record: Collective, c, x, work, reduction, root: int,
            persistent: bool = False) -> Library:
    """The MPI library's own ``record`` collective on a call's buffers (``work``, as the
    record prepared them for ``x`` on the :class:`~pyar.runtime.comm.Comm` ``c``), as one
    step. ``persistent`` (a built-in collective: collective): the library's persistent
    request, bound now."""
    send, recv, after = record.library_buffers(x, work, c.rank, root)
    if persistent:
        return PersistentLibrary(library_call(record, c.mpi, send, recv, reduction, root,
                                              "init")(), after)
    return Library(library_call(record, c.mpi, send, recv, reduction, root, start=True), after)
