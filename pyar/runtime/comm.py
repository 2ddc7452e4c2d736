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

import os
import threading
import zlib

import numpy as np
from mpi4py import MPI

from ..core.errors import MismatchError, PyarError, TimeoutError
from ..core.topology import Topology
from ..kernels import mailbox
from . import notice, progress, recorder, settings
from .p2p import tag_bits

_PLAN_CACHE = 256        # compiled (collective, algorithm, count) plans kept per Comm
_RECENT = mailbox.RECENT


_WORDS = 512           # bytes of a rank's call in words, in check_call's error path


def _check_setting() -> bool:
    """``PYAR_CHECK``: 1 checks every call across the ranks (:meth:`Comm.check_call`)."""
    text = os.environ.get("PYAR_CHECK", "").strip()
    if text not in ("", "0", "1"):
        raise ValueError(f"PYAR_CHECK must be 0 or 1, got {text!r}")
    return text == "1"


def _agreed_check(comm: MPI.Comm, check) -> bool:
    """``check``, once every rank of ``comm`` has the same (else ValueError on every rank)."""
    if not isinstance(check, bool):
        raise TypeError(f"check must be True or False, got {check!r}")
    votes = np.array([check, -check], np.int64)
    comm.Allreduce(MPI.IN_PLACE, votes, MPI.MIN)
    if votes[0] != -votes[1]:
        raise ValueError(f"check (PYAR_CHECK) must be the same on every rank; here, on rank "
                         f"{comm.Get_rank()}: {check}")
    return check


def _ranks(ranks: list[int]) -> str:
    """``rank 3`` or ``ranks 0-2, 5``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + settings.ranges(ranks)


def _free_duplicate(comm, keyval, attr):
    attr.free()


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_free_duplicate)
_MAKING: set = set()                # handles of the communicators whose Comm is being made
_MAKING_LOCK = threading.Lock()
_ANY_CALL = np.ones(1, np.int64)    # every Comm's token, when MPI has less than THREAD_MULTIPLE
_CALLS_KEPT = 1 << 12               # fingerprints a Comm keeps the calls of (beyond: its recent)
_take = [None]                      # kernels.mailbox.take, loaded with the first Comm
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
    first checks every rank's ``PYAR_*`` settings (:func:`pyar.runtime.settings.agree`).
    Functions taking ``comm=`` accept either and reuse one Comm per
    communicator. ``check=True`` (default: ``PYAR_CHECK=1``; the same on every
    rank) compares every call's fingerprint across the ranks before it runs
    (:meth:`check_call`).
    """

    def __init__(self, comm: MPI.Comm | None = None, *, check: bool | None = None):
        base = MPI.COMM_WORLD if comm is None else comm
        if not isinstance(base, MPI.Comm) or base == MPI.COMM_NULL:
            raise TypeError(f"comm must be an mpi4py communicator, a pyar.Comm or None, "
                            f"got {comm!r}")
        if base.Is_inter():
            raise TypeError("pyar collectives need an intracommunicator")
        self.settings = settings.agree(base)       # first: a bad one raises on every rank
        self.timeout = self.settings.timeout
        self.check = _agreed_check(base, _check_setting() if check is None else check)
        self.mpi = base.Dup()
        self.mpi.Set_name(f"pyar dup of {base.Get_name() or 'a communicator'}")
        self.notice = notice.Notice(base, self)
        self.rank = self.mpi.Get_rank()
        self.size = self.mpi.Get_size()
        self.topology = self._discover_topology()
        self.plans: dict = {}
        # the calls so far, whether one failed mid-way, and the fingerprints of the RECENT last
        # ones (kernels.mailbox's COMM_WORDS: a native start numbers its call here itself)
        self.words = np.zeros(mailbox.COMM_WORDS, np.int64)
        self.words[mailbox.COMM_RECENT:] = 1
        self.calls: dict = {1: None}    # fingerprint: the call (notice.fingerprint)
        self.agreed: set = set()    # of the recent calls, those that went through agree()
        fp_bits, self._seq_bits = tag_bits()
        self._fp_mask, self._seqs = (1 << fp_bits) - 1, (1 << self._seq_bits) - 1
        self.broken = None          # why its ranks are out of step, once a call failed mid-way
        # its call token, 1 while no call is in progress on it (see enter)
        self.token = np.ones(1, np.int64) if MPI.Query_thread() >= MPI.THREAD_MULTIPLE \
            else _ANY_CALL
        self._token = self.token.ctypes.data
        if _take[0] is None:
            _take[0] = mailbox.starter()[1]
        self.recorder = recorder.attach(self, recorder.DEFAULT_CALLS if self.settings.
                                        trace_buffer is None else self.settings.trace_buffer)
        for made in self.on_made:
            made(self)
        self.notice.listen()        # last: another thread's stalled wait may poll it at once

    on_made: list = []      # told of every Comm made, on every rank in the same order
                            # (observers attach here: pyar.observe; it may be collective)
    on_retire: list = []    # told of every Comm freed or made unusable (caches keyed by it)

    def __repr__(self):
        return f"<pyar.Comm rank {self.rank} of {self.size}>"

    def _discover_topology(self) -> Topology:
        """Which node each rank is on: ``PYAR_RANKS_PER_NODE``, else shared-memory domains."""
        if self.settings.ranks_per_node:
            return Topology.regular(self.size, self.settings.ranks_per_node)
        node = self.mpi.Split_type(MPI.COMM_TYPE_SHARED)
        first = np.array([self.rank], np.int64)     # the node's lowest rank names it
        try:
            node.Allreduce(MPI.IN_PLACE, first, MPI.MIN)
        finally:
            node.Free()
        firsts = np.empty(self.size, np.int64)
        self.mpi.Allgather(first, firsts)
        return Topology(firsts.tolist())

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

    @property
    def seq(self) -> int:
        """The collectives called on this Comm so far (the last one's number)."""
        return self.words.item(mailbox.COMM_SEQ)

    def enter(self, what: str) -> None:
        """Begin a call (``what``, e.g. ``"pyar.allreduce"``) on this Comm: take its call token
        (:attr:`token`, an int64 word: 1 while no call is in progress, taken natively, so
        atomically between threads, as a native start tests it), or raise PyarError saying
        why another thread's call in progress on it forbids this one; :meth:`leave` gives
        it back."""
        if not _take[0](self._token):
            raise _overlap_error(what)

    def leave(self) -> None:
        """End the call :meth:`enter` began."""
        self.token[0] = 1

    def in_call(self) -> bool:
        """Whether a call is in progress on this Comm (in some thread)."""
        return self.token.item(0) != 1

    def next_tag(self, entry: tuple = (1, None)) -> int:
        """Number the next collective on this Comm (:attr:`seq`) and remember its ``entry``,
        ``(fingerprint, call)`` (:mod:`pyar.runtime.notice`); its tag: the fingerprint
        and the sequence number (:func:`pyar.runtime.p2p.tag_bits`), so that collectives
        in flight together have tags of their own and a message of another call never
        matches."""
        words = self.words
        seq = words.item(mailbox.COMM_SEQ) + 1
        words[mailbox.COMM_SEQ] = seq
        words[mailbox.COMM_RECENT + seq % _RECENT] = entry[0]
        self.know(*entry)
        return (entry[0] & self._fp_mask) << self._seq_bits | 1 + seq % self._seqs

    def know(self, fingerprint: int, call) -> None:
        """Remember that ``fingerprint`` is ``call``'s (for the calls that a native start
        numbers: their request says so once); beyond :data:`_CALLS_KEPT` fingerprints, only
        the recent calls' are kept."""
        calls = self.calls
        if fingerprint not in calls:
            if len(calls) >= _CALLS_KEPT:
                recent = set(self.words[mailbox.COMM_RECENT:].tolist())
                self.calls = calls = {f: c for f, c in calls.items() if f in recent}
            calls[fingerprint] = call

    def recent(self, seq: int) -> tuple:
        """(fingerprint, call) of call number ``seq``, one of the last :data:`RECENT` (the
        fingerprint 1 and no call: none, or one that failed before its first message)."""
        fingerprint = self.words.item(mailbox.COMM_RECENT + seq % _RECENT)
        return fingerprint, self.calls.get(fingerprint)

    def unnumbered(self) -> None:
        """The current call failed before its first message, as every rank learnt: its
        number is left with no call."""
        self.words[mailbox.COMM_RECENT + self.seq % _RECENT] = 1

    def check_usable(self) -> None:
        """PyarError if a call on this Comm failed mid-way (its ranks are out of step)."""
        if self.broken is not None:
            raise PyarError(f"this communicator is unusable: {self.broken}; its ranks are out "
                            f"of step (make a new communicator)")

    def abandon(self, what: str, error: BaseException) -> None:
        """A call (``what``) failed after its first message: no later call may run on it.
        Where the failure is this rank's own, its other calls in flight on it fail too (they
        cannot count on peers out of step); a peer's failure, told, leaves them to complete
        (that peer completed the calls before its failed one)."""
        if self.broken is None:
            self.broken = f"{what} failed mid-way ({type(error).__name__}: {error})"
            self.words[mailbox.COMM_BROKEN] = 1
            if getattr(error, "failed_rank", None) is None:
                progress.stop(self, error)
            self._retire()
            self.notice.tell(what, error)       # so that the others raise too

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
            self.leave()

    def _free(self) -> None:
        self._retire()
        for plan in self.plans.values():
            plan.free()
        self.plans.clear()
        self.notice.free()
        if self.mpi != MPI.COMM_NULL:
            self.mpi.Free()         # and its shared-memory mailboxes with it

    def agree(self, oks: tuple, call: str, deadline=None, what: str = "") -> tuple:
        """Collective: for each of the integers ``oks``, its least value over the ranks (for a
        flag: whether it holds on every rank), and whether every rank passed the same
        ``call``; waiting until ``deadline`` (a ``time.monotonic()`` value) at most (then a
        TimeoutError naming ``what``)."""
        fingerprint = zlib.crc32(call.encode())
        votes = np.array([*oks, fingerprint, -fingerprint], np.int64)
        self._vote(votes, deadline, what or call, "agree on the call (its first with these "
                   "arguments)")
        return (*(int(v) for v in votes[:-2]), int(votes[-2]) == -int(votes[-1]))

    def check_call(self, call, deadline=None, what: str = "") -> None:
        """``PYAR_CHECK``: MismatchError on every rank unless every rank makes this call, with
        the same ``call`` tuple (collective, op, dtype, count, root, algorithm) and sequence
        number; the error names which ranks called what, from which source line. One
        MPI_Iallreduce of four integers (and, on a mismatch, one MPI_Allgather)."""
        fingerprint = notice.fingerprint(call)
        votes = np.array([fingerprint, -fingerprint, self.seq, -self.seq], np.int64)
        self._vote(votes, deadline, what, "check the call (PYAR_CHECK)")
        if votes[0] == -votes[1] and votes[2] == -votes[3]:
            return
        mine = f"#{self.seq} {notice.describe(call)} at {notice.caller()}".encode()[:_WORDS]
        table = np.zeros((self.size, _WORDS), np.uint8)
        self.notice.mpi.Allgather(np.frombuffer(mine.ljust(_WORDS, b"\0"), np.uint8), table)
        said: dict = {}
        for rank, row in enumerate(table):
            said.setdefault(row.tobytes().rstrip(b"\0").decode(errors="replace"), []).append(rank)
        raise MismatchError(f"{what}: the ranks' calls differ (PYAR_CHECK): " + "; ".join(
            f"{_ranks(ranks)} called {text}" for text, ranks in said.items()))
        # (on every rank, before any message of the call: the Comm stays usable)

    def _vote(self, votes: np.ndarray, deadline, what: str, waiting: str) -> None:
        """Collective, on the Notice's communicator: every one of ``votes`` (int64) becomes
        its least value over the ranks, waiting until ``deadline`` at most (then a
        TimeoutError: ``what`` waited for the other ranks to ``waiting``: did every rank
        call it?).

        The current call (:attr:`seq`) is marked as agreed on before any message: where
        two ranks both do, the vote, not their "at" notices, decides whether they called
        alike (:meth:`~pyar.runtime.notice.Notice.compare`); a notice sent while it
        waits would otherwise turn its clean MismatchError into a mid-way one, leaving the
        Comm unusable."""
        if len(self.agreed) >= notice.RECENT:
            self.agreed = {s for s in self.agreed if s > self.seq - notice.RECENT}
        self.agreed.add(self.seq)
        request = self.notice.mpi.Iallreduce(MPI.IN_PLACE, votes, MPI.MIN)
        try:
            progress.wait_for(request.Test, deadline, lambda waited: TimeoutError(
                f"{what}: waited {waited:.1f} s for the other ranks to {waiting}: did every "
                f"rank call it?"))
        except BaseException as e:      # the vote is still posted: out of step now
            progress.ABANDONED.append((request, votes))
            self.abandon(what, e)
            raise

    def remember(self, key, plan):
        """Keep ``plan`` under ``key``, forgetting the oldest beyond the cache's bound."""
        self.plans[key] = plan
        if len(self.plans) > _PLAN_CACHE:
            del self.plans[next(iter(self.plans))]
        return plan
