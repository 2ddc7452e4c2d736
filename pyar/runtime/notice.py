"""Notices: how a rank that fails a call tells the others, over a channel that works when the
collectives' own is stuck; and how stalled ranks find out that they called different things.

Every :class:`pyar.Comm` owns a :class:`Notice`: a second private duplicate
of the user's communicator (nothing of the collectives' can match there)
with one receive from any rank pre-posted on it. Two kinds of message travel
on it, each a few hundred bytes, never on a collective's hot path:

- **failed**: a rank whose call failed after it began (a timeout, a
  mismatch, any error mid-way: :meth:`pyar.Comm.abandon`) calls
  :meth:`Notice.tell`, which posts to every other rank which rank failed,
  which call (``"allreduce #17 on rank 3 (ring, 4 float32)"``), its number,
  the error's class and text. A rank waiting anywhere in pyar learns of it
  within a millisecond: :func:`poll` is the slow path of the one wait
  (:func:`pyar.runtime.progress.wait_for` calls it as ``on_stall`` every
  ``progress.STALL_POLL`` seconds once it yields its core) and tests every
  Notice's pre-posted receive; so does the start of every call that takes
  the full path. The communicator is unusable from then on (its ranks are
  out of step), and if this rank has reached the failed call there (it may
  be waiting for the failed rank) the wait raises an error of the failed
  rank's class (:class:`pyar.MismatchError`, :class:`pyar.TimeoutError`,
  :class:`pyar.ScheduleError`, else :class:`pyar.PyarError`) that reads
  ``"allreduce #17 on rank 0 stopped: rank 3 failed allreduce #17 on rank 3
  (ring, 4 float32): MismatchError: ..."``, its ``failed_rank`` 3;
  otherwise its next call on that communicator raises it (naming itself as
  the call stopped), or, if it is in a call there that stalls for
  :data:`STALLED_AFTER_FAILURE` seconds, that call does (the failed rank may
  have left it); once, and every later call says the communicator is
  unusable. A rank whose own call there failed already ignores the notice.
- **at**: a rank whose wait has stalled for :data:`STALL_SECONDS` posts, for
  each of its communicators once per call, its latest calls there (numbers,
  fingerprints, the calls in words: the :data:`RECENT` that ``Comm.recent``
  keeps) and its caller's source line to every other rank. A rank that finds
  a peer's call of some number other than its own call of that number raises
  :class:`pyar.MismatchError` naming both, which then reaches every rank as
  a *failed* notice. That diagnoses the mismatches that stall (an MPI
  message whose tag carries another call's fingerprint never matches; a rank
  that skipped a call, or called collectives in another order, waits for
  messages that never come) at no cost until a wait has stalled. A call
  that both ranks agree on before any message (a first call's agreement,
  ``PYAR_CHECK``'s) is left to that agreement, which raises cleanly on every
  rank and leaves the Comm usable.

The Notice's communicator also carries the Comm's agreements (a first call's,
:meth:`pyar.Comm.agree`, and ``PYAR_CHECK``'s): one that a failed call
leaves unmatched must not be on the collectives' own duplicate, whose collective
free (with its mailboxes' node communicator) could then hang.

A mismatch found in a wait on one communicator from the reports of another
is raised there all the same (both are out of step by then).
``listeners`` (functions ``listener(comm, message)``: the :class:`pyar.Comm`
and the notice as a dict) are told of every notice sent or received (a
flight recorder dumps there).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import sys
import threading
import weakref
import zlib

import numpy as np
from mpi4py import MPI

from ..core import errors
from ..core.ops import DTYPES, Op
from ..kernels import mailbox
from . import progress

TAG = 1                     # on the Notice's own communicator: nothing else travels there
NBYTES = 4096               # the largest notice (texts are cut to fit)
STALL_SECONDS = 0.1         # a wait this long sends the peers what it is calling
STALLED_AFTER_FAILURE = 1.0 # a call stalled this long after a peer failed a later one
FREE_SECONDS = 60.0         # the longest free() waits for the other ranks' notices
RECENT = mailbox.RECENT     # calls a Comm remembers (:meth:`Comm.recent`) for "at" notices
listeners: list = []
_LIVE: weakref.WeakSet = weakref.WeakSet()    # the Notices that stalled waits poll
_LIVE_LOCK = threading.RLock()  # held to change or list _LIVE: threads make, free and poll
                                # Notices at once (a WeakSet guards its iteration only from
                                # the garbage collector's removals; reentrant: a Notice's
                                # __del__ may run in a thread holding it)
_CLASSES = {cls.__name__: cls for cls in (errors.MismatchError, errors.TimeoutError,
                                          errors.ScheduleError, errors.PyarError)}
_PYAR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fingerprint(call) -> int:
    """The fingerprint of a call tuple ``(collective, op, dtype, count, root, algorithm)``: 31
    bits, odd (so a mailbox half's stamp is never 0, a free half's), the same on every rank; 1 for
    None (a call that has no tuple: the device path's)."""
    if call is None:
        return 1
    return zlib.crc32("/".join(map(str, call)).encode()) & 0x7FFFFFFF | 1


def guess(fingerprint_seen: int, call):
    """The call tuple nearest ``call`` whose fingerprint is ``fingerprint_seen`` (the peer's,
    from a mailbox half's stamp): ``call`` with another op and/or dtype; None if none is."""
    collective, _, _, count, root, algorithm = call
    for op in ("-", *(o.value for o in Op)):
        for dtype in DTYPES:
            other = (collective, op, dtype.name, count, root, algorithm)
            if fingerprint(other) == fingerprint_seen:
                return other
    return None


def describe(call) -> str:
    """A call tuple ``(collective, op, dtype, count, root, algorithm)`` in words."""
    if call is None:
        return "a call with no fingerprint (on device buffers, or refused on every rank)"
    collective, op, dtype, count, root, algorithm = call
    return (f"{collective}(op={op}, dtype={dtype}, count={count}, root={root}, "
            f"algorithm={algorithm})")


def caller() -> str:
    """``file:line`` of the first frame outside pyar (the user's call), or ``"?"``."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PYAR):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.relpath(frame.f_code.co_filename)}:{frame.f_lineno}"


class Notice:
    """The notice channel of one communicator: ``Notice(comm)`` duplicates the mpi4py
    communicator ``comm`` (collective) and pre-posts its receive. ``owner`` is the
    :class:`pyar.Comm` it belongs to (marked unusable when a peer's failure arrives), which
    calls :meth:`listen` once it is whole."""

    def __init__(self, comm: MPI.Comm, owner=None):
        self.mpi = comm.Dup()
        self.mpi.Set_name("pyar notices")
        self.rank, self.size = self.mpi.Get_rank(), self.mpi.Get_size()
        self.owner = owner
        self.buffer = bytearray(NBYTES)
        self.status = MPI.Status()
        self.request = self.mpi.Irecv([self.buffer, MPI.BYTE], MPI.ANY_SOURCE, TAG)
        self.sent: list = []        # (request, bytes) of notices posted, until complete
        self.sent_to = np.zeros(self.size, np.int64)    # notices posted to each rank
        self.received = np.zeros(self.size, np.int64)   # notices arrived from each rank
        self.reported = 0           # the owner's seq when it last sent an "at" notice
        self.peers: dict = {}       # rank -> its latest "at" notice
        self.failure = None         # a peer's "failed" notice, for the owner's next call
        self.lock = threading.RLock()   # one thread at a time on the request and the buffer

    def listen(self) -> None:
        """Join the channels every stalled wait polls, in any thread (:func:`poll`): only once
        the owner is whole, since polling reads it (a thread's wait polled a Comm another
        thread was still making, in the matrix at 8 ranks: "'Comm' object has no attribute
        'broken'")."""
        with _LIVE_LOCK:
            _LIVE.add(self)

    def tell(self, what: str, error: BaseException) -> None:
        """Tell every other rank that this rank's call ``what`` failed with ``error``."""
        if getattr(error, "failed_rank", None) is not None:
            return                  # it came from a notice: its rank told everyone already
        number = re.search(r"#(\d+)", what)
        self._post({"kind": "failed", "rank": self.rank, "what": what,
                    "seq": int(number[1]) if number else self.owner.seq,
                    "error": type(error).__name__, "text": str(error)})

    def report(self, where: str) -> None:
        """Tell every other rank the owner's latest calls (once per call; a stalled wait's),
        ``where`` the caller's line; then compare them with the peers' reports."""
        seq = self.owner.seq
        if self.reported == seq:
            return
        self.reported = seq
        self._post({"kind": "at", "rank": self.rank, "seq": seq, "where": where,
                    "calls": [[s, *self._mine(s)] for s in range(max(1, seq - RECENT + 1),
                                                                 seq + 1)],
                    "agreed": sorted(self.owner.agreed)})
        self.compare(where)

    def _mine(self, seq: int):
        """(fingerprint, call) of the owner's call number ``seq`` (one of its recent ones)."""
        return self.owner.recent(seq)

    def _post(self, message: dict) -> None:
        for listener in listeners:
            listener(self.owner, message)
        data = json.dumps(message).encode()
        if len(data) > NBYTES:
            message["text"] = message.get("text", "")[:NBYTES // 2] + " ..."
            data = json.dumps(message).encode()[:NBYTES]
        with self.lock:
            self.sent = [(r, b) for r, b in self.sent if not r.Test()]
            for peer in range(self.size):
                if peer != self.rank and self.mpi != MPI.COMM_NULL:
                    self.sent.append((self.mpi.Isend([data, MPI.BYTE], peer, TAG), data))
                    self.sent_to[peer] += 1

    def receive(self, calling: bool = False) -> None:
        """Handle every notice that has arrived: raise a peer's failure if the owner has
        reached the failed call (else keep it, for the owner's next call: ``calling``, from
        the start of a call), or a mismatch. (Two tests: MPICH completes a receive that
        arrived meanwhile at the second.) A thread that finds another receiving here leaves
        it to that one (threads calling on different communicators all poll every Notice)."""
        if calling and self.failure is not None:
            raise self.pending(True)
        if not self.lock.acquire(False):
            return
        try:
            self._receive(calling)
        finally:
            self.lock.release()

    def _arrived(self):
        """The notices that have arrived (each counted against its sender), as dicts."""
        while self.request and (self.request.Test(self.status) or
                                self.request.Test(self.status)):
            self.received[self.status.Get_source()] += 1
            message = json.loads(bytes(self.buffer[:self.status.Get_count(MPI.BYTE)]))
            self.request = self.mpi.Irecv([self.buffer, MPI.BYTE], MPI.ANY_SOURCE, TAG)
            yield message

    def _receive(self, calling: bool) -> None:
        for message in self._arrived():
            for listener in listeners:
                listener(self.owner, message)
            if message["kind"] == "failed":
                self._failed(message, calling)
            elif self.owner is not None and self.owner.broken is None:
                self.peers[message["rank"]] = message
                self.compare(None)

    def _failed(self, message: dict, calling: bool) -> None:
        owner = self.owner
        if owner is not None and owner.broken is not None and self.failure is None:
            return                  # this rank's own call failed already: it knows
        if owner is None:
            raise self._error(message, calling)
        if not calling and owner.seq < message["seq"]:
            self.failure = self.failure or message  # not there yet (or in a call that may
            owner.abandon(f"a peer's call (rank {message['rank']})",    # still complete:
                          self._error(message, None))                   # see poll)
            return
        error = self._error(message, calling)
        owner.abandon(f"a peer's call (rank {message['rank']})", error)
        raise error

    def pending(self, calling: bool) -> BaseException:
        """The peer's failure kept for the owner's next call (or its stalled one), as the
        error that call raises; kept no longer (later calls find the owner unusable)."""
        message, self.failure = self.failure, None
        return self._error(message, calling)

    def _error(self, message: dict, calling) -> BaseException:
        """A peer's "failed" ``message`` as an error of its class, naming the owner's call
        that it stops: the one it starts (``calling`` True), the latest (False), or none
        (None)."""
        owner = self.owner
        here = ""
        if owner is not None and calling:
            here = f"call #{owner.seq + 1} on rank {self.rank} stopped: "
        elif owner is not None and calling is not None and owner.seq:
            call = self._mine(owner.seq)[1]
            here = (f"{'a call' if call is None else call[0]} #{owner.seq} on rank "
                    f"{self.rank} stopped: ")
        cls = _CLASSES.get(message["error"], errors.PyarError)
        error = cls(f"{here}rank {message['rank']} failed {message['what']}: "
                    f"{message['error']}: {message['text']}")
        error.failed_rank = message["rank"]
        return error

    def compare(self, where) -> None:
        """MismatchError if a peer reported a call other than the owner's call of that number,
        compared at the lower of the two ranks' latest numbers (earlier calls completed, or
        failed on every rank), unless both ranks agree on that call before any message
        (:meth:`pyar.Comm.agree`: the agreement decides); ``where``: the caller's line, if
        known."""
        seq, agreed = self.owner.seq, self.owner.agreed
        odd: dict = {}          # number -> {rank: its call there, in words}
        # (a copy: another thread's poll may add a peer's report meanwhile; list() of a
        # dict's items runs in C, holding the GIL throughout)
        for rank, message in list(self.peers.items()):
            for s, theirs, call in message["calls"]:    # the latest call of one of the two
                if s == min(seq, message["seq"]) and seq - RECENT < s and \
                        self._mine(s)[0] != theirs and \
                        not (s in agreed and s in message["agreed"]):
                    at = f" at {message['where']}" if s == message["seq"] else ""
                    odd.setdefault(s, {})[rank] = describe(call and tuple(call)) + at
        if not odd:
            return
        s = min(odd)
        at = f" at {where or caller()}" if s == seq else ""
        theirs = "; ".join(f"rank {r} called {said}" for r, said in sorted(odd[s].items()))
        error = errors.MismatchError(
            f"ranks called different collectives as call #{s} on this communicator: rank "
            f"{self.rank} called {describe(self._mine(s)[1])}{at}; {theirs} (control flow "
            f"diverged, or the arguments differ)")
        self.owner.abandon(f"call #{s} on rank {self.rank}", error)
        raise error

    def free(self) -> None:
        """Collective, as :meth:`pyar.Comm.free` is (idempotent): once every notice posted on
        the channel has arrived, cancel the pre-posted receive and free the duplicate.

        MPI gives a freed communicator's context to a later one, and Open MPI delivers a
        message that arrives for it to that one, out of its order: a notice posted to a rank
        that had freed its Comm hung the next communicator's MPI_Allreduce there (the
        matrix, 3 ranks). So the ranks first tell each other how many notices each posted
        to each (one MPI_Ialltoall) and take those still on their way. Where a rank's call
        failed on the Comm (it told every peer, and does not wait for them here) or the
        others do not come within :data:`FREE_SECONDS`, the duplicate is left to
        MPI_Finalize instead."""
        with _LIVE_LOCK:            # no stalled wait reports on it from now on
            _LIVE.discard(self)
        if not MPI.Is_finalized() and self.mpi != MPI.COMM_NULL and self.request and \
                self._drained():    # (no request: retired, by an earlier free too)
            self.retire()
            self.mpi.Free()
        else:
            self.retire()

    def _drained(self) -> bool:
        """Whether every notice posted to this rank has arrived, as every rank's counts say;
        False once a peer's failure arrives (it does not count) or after
        :data:`FREE_SECONDS`."""
        if self.owner is not None and self.owner.broken is not None:
            return False
        owed = np.zeros_like(self.sent_to)
        request = self.mpi.Ialltoall(self.sent_to, owed)
        failed = []                 # a peer's failure that arrived meanwhile, or why it stopped

        def settled():
            with self.lock:
                failed.extend(m for m in self._arrived() if m["kind"] == "failed")
            return bool(failed) or request.Test() and bool((self.received >= owed).all())

        late = errors.TimeoutError(f"the other ranks did not free it within {FREE_SECONDS} s")
        try:
            progress.wait_for(settled, progress.deadline_of(FREE_SECONDS), lambda waited: late)
        except BaseException as e:  # (or another communicator's failure, found meanwhile)
            failed.append(e)
            if e is not late:
                raise
        finally:
            if failed:
                progress.ABANDONED.append((request, owed))  # still posted: MPI may write there
        return not failed

    def retire(self) -> None:
        """The local part of :meth:`free`: cancel the pre-posted receive, let go of the sent
        notices' requests. What a Notice dropped without free() does (garbage collection runs
        at different moments on different ranks, and freeing a communicator may synchronize
        its ranks in MPICH: seen to hang the next collective), and every Notice at exit;
        its duplicate is then left to MPI_Finalize."""
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if MPI.Is_finalized() or self.mpi == MPI.COMM_NULL:
            return
        if self.request:
            self.request.Cancel()
            self.request.Wait()
        for request, _ in self.sent:
            if request:
                request.Free()
        self.sent = []

    __del__ = retire


def poll(waited: float) -> None:
    """The stalled wait's duty (``waited`` seconds so far): handle the notices that arrived on
    any communicator; past :data:`STALL_SECONDS`, report this rank's latest calls on each
    to its peers."""
    with _LIVE_LOCK:
        notices = list(_LIVE)
    for notice in notices:
        notice.receive()
        if notice.failure is not None and waited >= STALLED_AFTER_FAILURE and \
                notice.owner.in_call():
            raise notice.pending(False)     # a call there, stalled, after a peer failed
                                            # a later one
    if waited >= STALL_SECONDS:
        where = None
        for notice in notices:
            owner = notice.owner
            if owner is not None and owner.broken is None and notice.size > 1 and \
                    notice.reported != owner.seq:
                notice.report(where := where or caller())


progress.on_stall = poll


@atexit.register            # before mpi4py's MPI_Finalize: no receive left posted
def _retire_all() -> None:
    with _LIVE_LOCK:
        notices = list(_LIVE)
    for notice in notices:
        notice.retire()
