"""Notices: how a rank that fails a call tells the others, over a channel that works when the
collectives' own is stuck; and how stalled ranks find out that they called different things.

Every :class:`pyar.Comm` owns a :class:`Notice`: a second private duplicate
of the user's communicator (nothing of the collectives' can match on it)
with one receive from any rank pre-posted on it. Two kinds of message
travel there, each a few hundred bytes, never on a collective's hot path:

- **failed**: a rank whose call failed after it began (a timeout, a
  mismatch, any error mid-way: :meth:`pyar.Comm.abandon`) calls
  :meth:`Notice.tell`, which posts to every other rank which rank failed,
  which call (``"allreduce #17 on rank 3 (ring, 4 float32)"``), the error's
  class and text. A rank waiting anywhere in pyar learns of it within a
  millisecond: :func:`poll` is the slow path of the one wait,
  :func:`pyar.executors.progress.wait_for` (``on_stall``, every
  ``progress.STALL_POLL`` seconds once it yields the core), and tests every Notice's pre-posted receive and raises
  there an error of the failed rank's class (:class:`pyar.MismatchError`,
  :class:`pyar.TimeoutError`, :class:`pyar.ScheduleError`, else
  :class:`pyar.PyarError`) that reads ``"allreduce #17 on rank 0 stopped:
  rank 3 failed allreduce #17 on rank 3 (ring, 4 float32): MismatchError:
  ..."`` (its own latest call first); its ``failed_rank`` attribute is 3. The communicator is unusable from then on (its ranks are out of step),
  and a rank that failed by itself ignores the notices of that call.
- **at**: a rank whose wait has stalled for :data:`STALL_SECONDS` posts, once
  per call, what it is calling on its communicator (sequence number,
  fingerprint, the call in words, the caller's source line) to every other
  rank. A stalled rank that sees a peer at the same sequence number with a
  different fingerprint raises :class:`pyar.MismatchError` naming both
  calls, which then reaches every rank as a *failed* notice. That catches
  the mismatches that stall (an MPI message whose tag carries another
  fingerprint never matches; a rank that skipped a call or called another
  collective waits for messages that never come) at no cost until a wait
  has stalled.

The call a rank is in is ``ACTIVE[0]``, ``(comm, fingerprint, call)``, set by
each call (one list store on the hot path). Errors from a notice are
raised in whichever wait the rank is in, on any communicator: its peers are
most likely stuck behind the failed rank. ``listeners`` (functions
``listener(comm, message)``, ``message`` the decoded dict) are told of every
notice sent or received (a flight recorder dumps there).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import weakref
import zlib

from mpi4py import MPI

from .. import errors
from . import progress

TAG = 1                     # on the Notice's own communicator: nothing else travels there
NBYTES = 4096               # the largest notice (texts are cut to fit)
STALL_SECONDS = 0.1         # a wait this long sends the peers what it is calling
ACTIVE: list = [(None, 0, None)]   # [(the Comm of the latest call, its fingerprint, its call)]
listeners: list = []
_LIVE: weakref.WeakSet = weakref.WeakSet()
_CLASSES = {cls.__name__: cls for cls in (errors.MismatchError, errors.TimeoutError,
                                          errors.ScheduleError, errors.PyarError)}
_PYAR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fingerprint(call) -> int:
    """The fingerprint of a call tuple ``(collective, op, dtype, count, root, algorithm)``: 31
    bits, never 0 (a mailbox slot's mark before any call), the same on every rank."""
    return zlib.crc32("/".join(map(str, call)).encode()) & 0x7FFFFFFF | 1


def describe(call) -> str:
    """A call tuple ``(collective, op, dtype, count, root, algorithm)`` in words."""
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
    :class:`pyar.Comm` it belongs to (marked unusable when a peer's failure arrives)."""

    def __init__(self, comm: MPI.Comm, owner=None):
        self.mpi = comm.Dup()
        self.mpi.Set_name("pyar notices")
        self.rank, self.size = self.mpi.Get_rank(), self.mpi.Get_size()
        self.owner = owner
        self.buffer = bytearray(NBYTES)
        self.status = MPI.Status()
        self.request = self.mpi.Irecv([self.buffer, MPI.BYTE], MPI.ANY_SOURCE, TAG)
        self.sent: list = []        # (request, bytes) of notices posted, until complete
        self.reported = None        # (seq, fingerprint) last sent in an "at" notice
        self.peers: dict = {}       # rank -> its latest "at" notice
        _LIVE.add(self)

    def tell(self, what: str, error: BaseException) -> None:
        """Tell every other rank that this rank's call ``what`` failed with ``error``."""
        if getattr(error, "failed_rank", None) is not None:
            return                  # it came from a notice: its rank told everyone already
        self._post({"kind": "failed", "rank": self.rank, "what": what,
                    "error": type(error).__name__, "text": str(error)})

    def report(self, seq: int, fingerprint: int, call, where: str) -> None:
        """Tell every other rank what this rank is calling (once per call): a stalled wait's."""
        if self.reported == (seq, fingerprint):
            return
        self.reported = (seq, fingerprint)
        self._post({"kind": "at", "rank": self.rank, "seq": seq, "fingerprint": fingerprint,
                    "call": list(call), "where": where})
        self.compare(seq, fingerprint, call, where)

    def _post(self, message: dict) -> None:
        for listener in listeners:
            listener(self.owner, message)
        data = json.dumps(message).encode()
        if len(data) > NBYTES:
            message["text"] = message.get("text", "")[:NBYTES // 2] + " ..."
            data = json.dumps(message).encode()[:NBYTES]
        self.sent = [(r, b) for r, b in self.sent if not r.Test()]
        for peer in range(self.size):
            if peer != self.rank and self.mpi != MPI.COMM_NULL:
                self.sent.append((self.mpi.Isend([data, MPI.BYTE], peer, TAG), data))

    def receive(self) -> None:
        """Handle every notice that has arrived (raising a peer's failure, or a mismatch)."""
        while self.request and self.request.Test(self.status):
            n = self.status.Get_count(MPI.BYTE)
            message = json.loads(bytes(self.buffer[:n]))
            self.request = self.mpi.Irecv([self.buffer, MPI.BYTE], MPI.ANY_SOURCE, TAG)
            for listener in listeners:
                listener(self.owner, message)
            if message["kind"] == "failed":
                self._failed(message)
            else:
                self.peers[message["rank"]] = message
                comm, fingerprint, call = ACTIVE[0]
                if comm is self.owner and comm is not None:
                    self.compare(comm.seq, fingerprint, call, None)

    def _failed(self, message: dict) -> None:
        owner = self.owner
        if owner is not None and owner.broken is not None:
            return                  # this rank's own call failed already: it knows
        cls = _CLASSES.get(message["error"], errors.PyarError)
        comm, _, call = ACTIVE[0]
        here = "" if comm is None or call is None else \
            f"{call[0]} #{comm.seq} on rank {comm.rank} stopped: "
        error = cls(f"{here}rank {message['rank']} failed {message['what']}: "
                    f"{message['error']}: {message['text']}")
        error.failed_rank = message["rank"]
        if owner is not None:
            owner.abandon(f"a peer's call (rank {message['rank']})", error)
        raise error

    def compare(self, seq: int, fingerprint: int, call, where) -> None:
        """MismatchError if a peer reported a call of number ``seq`` other than this rank's."""
        odd = {r: m for r, m in self.peers.items()
               if m["seq"] == seq and m["fingerprint"] != fingerprint}
        if not odd or call is None:
            return
        where = where or caller()
        theirs = "; ".join(f"rank {r} called {describe(m['call'])} at {m['where']}"
                           for r, m in sorted(odd.items()))
        raise errors.MismatchError(
            f"ranks called different collectives as call #{seq} on this communicator: rank "
            f"{self.rank} called {describe(call)} at {where}; {theirs} (control flow "
            f"diverged, or the arguments differ)")

    def free(self) -> None:
        """Cancel the pre-posted receive and free the duplicate (idempotent)."""
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
        self.mpi.Free()


def poll(waited: float) -> None:
    """The stalled wait's duty (``waited`` seconds so far): handle the notices that arrived on
    any communicator; past :data:`STALL_SECONDS`, report this rank's call to its peers."""
    for notice in list(_LIVE):
        notice.receive()
    comm, fingerprint, call = ACTIVE[0]
    if waited >= STALL_SECONDS and comm is not None and call is not None:
        notice = getattr(comm, "notice", None)
        if notice is not None and notice.size > 1:
            notice.report(comm.seq, fingerprint, call, caller())


progress.on_stall = poll


@atexit.register            # before mpi4py's MPI_Finalize: no receive left posted
def _free_all() -> None:
    for notice in list(_LIVE):
        notice.free()
