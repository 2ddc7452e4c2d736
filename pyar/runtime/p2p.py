"""The general path: a plan's steps as MPI point-to-point requests, and what every engine of a
plan shares (spans of its buffers, tags, marks, the checks of what arrives).

A compiled step moves :class:`Span` s of the call's buffers (:data:`DATA`,
:data:`SCRATCH`, :data:`LANDING`, and x as :data:`SOURCE` in an out-of-place
variant). A :class:`P2PStep` posts its receives, then its sends, as
``MPI_Irecv``/``MPI_Isend`` with the call's tag; messages travel as MPI_BYTE
(a schedule moves bytes; the reduction is pyar's own, :mod:`pyar.kernels`).
A receive that folds, or lands on a span the same step sends, lands in the
landing buffer and takes effect when the step ends; every other lands in
place. Cost over the bytes: a Python call per request and one ``Testall`` a
poll, which :mod:`.programs` avoids for small plans.
"""

from __future__ import annotations

from typing import NamedTuple

from mpi4py import MPI

from ..core.errors import MismatchError, ScheduleError
from . import notice
from .progress import Step

DATA, SCRATCH, LANDING, SOURCE = 0, 1, 2, 3     # SOURCE: x, in an out-of-place variant
_BYTE = MPI.BYTE


class Span(NamedTuple):
    peer: int
    buf: int
    lo: int
    hi: int


class Receive(NamedTuple):
    wire: Span            # where MPI writes
    dst: Span | None      # where a landed message goes at the end of the step, else None
    fold: bool
    source: Span | None = None     # x's elements folded into the wire's once it has landed


def overlap(a: Span, b: Span) -> bool:
    """Whether two non-empty spans share elements of one buffer."""
    return a.buf == b.buf and a.lo < b.hi and b.lo < a.hi and a.lo < a.hi and b.lo < b.hi


def land(recv: Receive, bufs, fold):
    """A message that landed takes effect: folded in with ``fold(dst, src)``, or copied; or,
    received in place, has x's elements folded into it (out-of-place variant)."""
    d, w = recv.dst, recv.wire
    incoming = bufs[w.buf][w.lo:w.hi]
    if d is None:
        s = recv.source
        fold(incoming, bufs[SOURCE][s.lo:s.hi])
    elif recv.fold:
        fold(bufs[d.buf][d.lo:d.hi], incoming)
    else:
        bufs[d.buf][d.lo:d.hi] = incoming


def tag_bits() -> tuple[int, int]:
    """(fingerprint bits, sequence bits) of pyar's tags: a tag is ``fingerprint
    << sequence bits | s``, below MPI_TAG_UB (2**29 - 1 in MPICH: 16 and 12 bits; at MPI's
    least, 32767: 6 and 8), ``s`` 0 for a :class:`~.programs.Resident`'s persistent
    requests, else the call's sequence number wrapped into ``[1, 2**sequence bits)``. A message whose tag
    carries another call's fingerprint never matches: the mismatch stalls, and the stall is
    diagnosed (:mod:`.notice`), instead of a wrong result. (MPI_TAG_UB is an attribute of
    MPI_COMM_WORLD, the same for every communicator: Open MPI gives none on a split one.)"""
    bits = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB).bit_length() - 1
    seq = 12 if bits >= 24 else 8
    return bits - seq, seq


def resident_tag(fingerprint: int) -> int:
    """The tag of a Resident's persistent requests for calls of ``fingerprint``."""
    fp_bits, seq_bits = tag_bits()
    return (fingerprint & ((1 << fp_bits) - 1)) << seq_bits


def mark(fingerprint: int, seq: int) -> int:
    """A mailbox half's stamp for a call: its fingerprint and (31 bits of) its sequence
    number (never 0, the stamp of a free half: a fingerprint is odd); as a native program
    makes it (:mod:`pyar.kernels.mailbox`)."""
    return fingerprint | (seq & 0x7FFFFFFF) << 32


def mismatch(where: str, peer: int, theirs: int, mine: int, call) -> MismatchError:
    """The error of a message whose mark (``theirs``) is not this call's (``mine``, of the
    tuple ``call``): both calls in words where the peer's differs only in op or dtype."""
    seq, seen = mine >> 32, theirs >> 32
    if theirs & 0xFFFFFFFF == mine & 0xFFFFFFFF:
        said = (f"rank {peer}'s call #{seen}, this rank's #{seq}, both "
                f"{notice.describe(call)}: a rank skipped a call, or called another "
                f"collective in between")
    else:
        other = None if call is None else notice.guess(theirs & 0xFFFFFFFF, call)
        said = (f"rank {peer} called {notice.describe(other)} as #{seen}, this rank "
                f"{notice.describe(call)} as #{seq}" if other is not None else
                f"its fingerprint differs: the ranks called with different collectives, ops, "
                f"dtypes, counts, roots or algorithms")
    return MismatchError(f"{where}: the message from rank {peer} is of another call ({said})")


def check_size(status: MPI.Status, view, peer: int, where: str):
    """A message shorter than its receive would leave stale bytes in place: refuse it."""
    got = status.Get_count(_BYTE)
    if got != view.nbytes:
        raise ScheduleError(f"{where}: received {got} bytes from peer {peer}, expected "
                            f"{view.nbytes} (do the ranks agree on the schedule and the count?)")


class Context:
    """What a plan's steps run on in one call: ``bufs`` (data, scratch, landing, source), the
    communicator, the call's tag and fold; and the current step's posted requests."""

    __slots__ = ("bufs", "comm", "tag", "fold", "views", "requests", "statuses", "after")

    def __init__(self, bufs, comm, tag, fold, after=None):
        self.bufs, self.comm, self.tag, self.fold, self.after = bufs, comm, tag, fold, after
        self.views = self.requests = self.statuses = ()


class P2PStep(Step):
    """A step of the general path: its receives posted with ``MPI_Irecv`` on their wire spans
    (a landing buffer where the message folds or overlaps a send), then its sends with
    ``MPI_Isend``; complete once every request is; then sizes are checked and landed
    messages fold or copy into place in the schedule's order."""

    __slots__ = ("where", "sends", "recvs")

    def __init__(self, where, sends, recvs):
        self.where, self.sends, self.recvs = where, sends, recvs

    def start(self, ctx: Context) -> None:
        bufs, comm, tag = ctx.bufs, ctx.comm, ctx.tag
        views = [bufs[r.wire.buf][r.wire.lo:r.wire.hi] for r in self.recvs]
        requests = [comm.Irecv([view, _BYTE], r.wire.peer, tag)
                    for view, r in zip(views, self.recvs)]
        requests += [comm.Isend([bufs[s.buf][s.lo:s.hi], _BYTE], s.peer, tag)
                     for s in self.sends]
        ctx.views, ctx.requests = views, requests
        ctx.statuses = [MPI.Status() for _ in requests]

    def test(self, ctx: Context) -> bool:
        return MPI.Request.Testall(ctx.requests, ctx.statuses)

    def finish(self, ctx: Context) -> None:
        bufs, fold = ctx.bufs, ctx.fold
        for view, r, status in zip(ctx.views, self.recvs, ctx.statuses):
            check_size(status, view, r.wire.peer, self.where)
            if r.dst is not None or r.source is not None:
                land(r, bufs, fold)
        if ctx.after is not None:
            ctx.after()

    def pending(self, ctx: Context) -> list[int]:
        peers = [r.wire.peer for r in self.recvs] + [s.peer for s in self.sends]
        return sorted({p for p, q in zip(peers, ctx.requests) if q and not q.Get_status()})


class CopyStep(Step):
    """Out-of-place variant: x's elements copied into data where the schedule is about to use
    what data held before anything was written to it (or, at the end, never wrote it);
    ``ranges`` of data, x's elements from data's ``shift`` on. No transfers: complete as
    soon as it starts; the copies are its finish."""

    __slots__ = ("ranges", "shift")
    where = "copying x in"

    def __init__(self, ranges, shift: int = 0):
        self.ranges, self.shift = ranges, shift

    def start(self, ctx):
        pass

    def test(self, ctx):
        return True

    def finish(self, ctx):
        data, source, shift = ctx.bufs[DATA], ctx.bufs[SOURCE], self.shift
        for lo, hi in self.ranges:
            data[lo:hi] = source[lo - shift:hi - shift]
