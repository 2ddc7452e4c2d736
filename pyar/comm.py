"""Comm: pyar's handle on an MPI communicator.

Each user communicator gets one private duplicate, cached on it as an MPI
attribute (the way MPI libraries keep their own communicators), so pyar's
messages can never match the user's and the duplicate is freed with the
user's communicator. The Comm also knows the ranks' :class:`Topology`,
caches compiled schedules and numbers the collectives called on it.

Threads: the collectives on one communicator must be called one at a time
and in the same order on every rank (MPI's rule, which threads racing for
it cannot keep), so a call while another thread is in a call on the same
Comm raises PyarError at once (:meth:`Comm.enter`). Different communicators
in different threads are fine when MPI provides MPI_THREAD_MULTIPLE (mpi4py
asks for it); with less, no two pyar calls may overlap at all, on any
communicator, and the second raises.
"""

from __future__ import annotations

import threading
import zlib

import numpy as np
from mpi4py import MPI

from . import settings
from .errors import PyarError, TimeoutError
from .executors import progress
from .executors.mpi import RESIDENT_TAG
from .topology import Topology

_PLAN_CACHE = 256        # compiled (collective, algorithm, count) plans kept per Comm


def _free_duplicate(comm, keyval, attr):
    attr.free()


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_free_duplicate)
_MAKING: set = set()                # handles of the communicators whose Comm is being made
_MAKING_LOCK = threading.Lock()
_ANY_CALL = threading.Lock()        # every Comm's, when MPI has less than THREAD_MULTIPLE
_LEVELS = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED: "MPI_THREAD_FUNNELED",
           MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED"}


def _overlap_error(what: str) -> PyarError:
    level = MPI.Query_thread()
    if level >= MPI.THREAD_MULTIPLE:
        return PyarError(
            f"{what}: another thread is in a pyar call on this communicator; the collectives "
            f"on one communicator must be called one at a time and in the same order on "
            f"every rank (MPI's rule), which threads cannot guarantee: give each thread a "
            f"communicator of its own (comm.Dup())")
    return PyarError(
        f"{what}: another thread is in a pyar call, and this MPI was initialized with "
        f"{_LEVELS.get(level, level)}, not MPI_THREAD_MULTIPLE, so pyar calls from several "
        f"threads must not overlap, on any communicator (mpi4py.rc.thread_level = "
        f"'multiple' asks for more)")


class Comm:
    """A communicator for pyar's collectives.

    ``Comm(comm)`` wraps an mpi4py communicator (``None`` = COMM_WORLD).
    Creating one duplicates ``comm``: a collective call on every rank, which
    first checks every rank's ``PYAR_*`` settings (:func:`pyar.settings.agree`).
    Functions taking ``comm=`` accept either and reuse one Comm per
    communicator.
    """

    def __init__(self, comm: MPI.Comm | None = None):
        base = MPI.COMM_WORLD if comm is None else comm
        if not isinstance(base, MPI.Comm) or base == MPI.COMM_NULL:
            raise TypeError(f"comm must be an mpi4py communicator, a pyar.Comm or None, "
                            f"got {comm!r}")
        if base.Is_inter():
            raise TypeError("pyar collectives need an intracommunicator")
        self.settings = settings.agree(base)       # first: a bad one raises on every rank
        self.timeout = self.settings.timeout
        self.mpi = base.Dup()
        self.mpi.Set_name(f"pyar dup of {base.Get_name() or 'a communicator'}")
        self.rank = self.mpi.Get_rank()
        self.size = self.mpi.Get_size()
        self.topology = self._discover_topology()
        self.plans: dict = {}
        self.seq = 0                # collectives called on this Comm so far
        self.broken = None          # why its ranks are out of step, once a call failed mid-way
        # held by the call in progress on it (acquire(False): see enter)
        self.busy = threading.Lock() if MPI.Query_thread() >= MPI.THREAD_MULTIPLE else _ANY_CALL

    on_retire: list = []    # told of every Comm freed or made unusable (caches keyed by it)

    def __repr__(self):
        return f"<pyar.Comm rank {self.rank} of {self.size}>"

    def _discover_topology(self) -> Topology:
        """Which node each rank is on: ``PYAR_RANKS_PER_NODE``, else shared-memory domains."""
        if self.settings.ranks_per_node:
            return Topology.regular(self.size, self.settings.ranks_per_node)
        node = self.mpi.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            first = node.allreduce(self.rank, MPI.MIN)     # the node's lowest rank names it
        finally:
            node.Free()
        return Topology(self.mpi.allgather(first))

    @classmethod
    def of(cls, comm=None) -> Comm:
        """The Comm for ``comm``: itself if a Comm, else the one cached on the communicator."""
        if isinstance(comm, Comm):
            return comm
        base = MPI.COMM_WORLD if comm is None else comm
        if not isinstance(base, MPI.Comm):
            raise TypeError(f"comm must be an mpi4py communicator, a pyar.Comm or None, "
                            f"got {comm!r}")
        found = base.Get_attr(_KEYVAL)
        if found is None:
            found = cls._make(base)
        return found

    @classmethod
    def _make(cls, base: MPI.Comm) -> Comm:
        """The Comm of ``base``, made now (collective); PyarError if another thread is making
        it at the same time."""
        handle = MPI._handleof(base)
        with _MAKING_LOCK:
            if handle in _MAKING:
                raise _overlap_error("making a pyar.Comm")
            _MAKING.add(handle)
        try:
            found = base.Get_attr(_KEYVAL)      # another thread's, made meanwhile
            if found is None:
                found = cls(base)
                base.Set_attr(_KEYVAL, found)
            return found
        finally:
            _MAKING.discard(handle)

    def enter(self, what: str):
        """Begin a call (``what``, e.g. ``"pyar.allreduce"``) on this Comm: its :attr:`busy`
        lock, taken without waiting, or PyarError saying why another thread's call in
        progress on it forbids this one. The caller releases it (``c.busy.release()``)."""
        if not self.busy.acquire(False):
            raise _overlap_error(what)
        return self.busy

    def next_tag(self) -> int:
        """Number the next collective on this Comm (:attr:`seq`); its tag: the sequence number
        wrapped below the tag of the executor's persistent requests (MPI guarantees tags
        up to 32767), so collectives in flight together have tags of their own."""
        self.seq += 1
        return self.seq % RESIDENT_TAG

    def check_usable(self) -> None:
        """PyarError if a call on this Comm failed mid-way (its ranks are out of step)."""
        if self.broken is not None:
            raise PyarError(f"this communicator is unusable: {self.broken}; its ranks are out "
                            f"of step (make a new communicator)")

    def abandon(self, what: str, error: BaseException) -> None:
        """A call (``what``) failed after its first message: no later call may run on it."""
        if self.broken is None:
            self.broken = f"{what} failed mid-way ({type(error).__name__}: {error})"
            self._retire()

    def _retire(self) -> None:
        for forget in self.on_retire:
            forget(self)

    def free(self) -> None:
        """Release the duplicate communicator (also done when the user's is freed)."""
        self.enter("pyar.Comm.free")
        try:
            with progress.lock():
                self._free()
        finally:
            self.busy.release()

    def _free(self) -> None:
        self._retire()
        for plan in self.plans.values():
            plan.free()
        self.plans.clear()
        if self.mpi != MPI.COMM_NULL:
            self.mpi.Free()         # and its shared-memory mailboxes with it

    def agree(self, oks: tuple, call: str, deadline=None, what: str = "") -> tuple:
        """Collective: for each of the integers ``oks``, its least value over the ranks (for a
        flag: whether it holds on every rank), and whether every rank passed the same
        ``call``; waiting until ``deadline`` (a ``time.monotonic()`` value) at most (then a
        TimeoutError naming ``what``)."""
        fingerprint = zlib.crc32(call.encode())
        votes = np.array([*oks, fingerprint, -fingerprint], np.int64)
        request = self.mpi.Iallreduce(MPI.IN_PLACE, votes, MPI.MIN)
        try:
            progress.wait_for(request.Test, deadline, lambda waited: TimeoutError(
                f"{what or call}: waited {waited:.1f} s for the other ranks to agree on the "
                f"call (its first with these arguments): did every rank call it?"))
        except BaseException as e:      # the agreement is still posted: out of step now
            progress.ABANDONED.append((request, votes))
            self.abandon(what or call, e)
            raise
        return (*(int(v) for v in votes[:-2]), int(votes[-2]) == -int(votes[-1]))

    def remember(self, key, plan):
        """Keep ``plan`` under ``key``, forgetting the oldest beyond the cache's bound."""
        self.plans[key] = plan
        if len(self.plans) > _PLAN_CACHE:
            del self.plans[next(iter(self.plans))]
        return plan
