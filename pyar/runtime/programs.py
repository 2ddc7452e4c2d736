"""A plan bound to buffers once and run by native programs: :class:`Resident` (small plans) and
:class:`Stream` (large plans whose ranks share a node).

A :class:`Resident` is a plan of at most :data:`~pyar.model.cost.RESIDENT_BYTES`
on buffers of its own (or a caller's, bound): every message to a rank of the
same node goes through a shared-memory mailbox (:mod:`.shm`), every other
one is a persistent request (``MPI_Send_init``/``MPI_Recv_init``), every fold
a kernel bound to its views, all made once; a call copies in, runs each
step, copies out. When every message of the plan is a mailbox one, the
call's steps are one native program (:mod:`pyar.kernels.mailbox`): a single
call from Python, where a small call's time is Python's, not the wire's.

A :class:`Stream` runs a larger plan on the caller's own buffers: one
native program a call. Each message is streamed through a mailbox in pieces
of :data:`PIECE` bytes, copied once into shared memory and folded straight
out of it (MPI copies twice, and the fold reads a landing buffer); or, for a
buffer of :data:`ATTACH_BYTES` or more where the node's ranks may read each
other's memory (cross-memory attach, :attr:`.shm.Pool.attach`), the receiver
reads it straight out of the sender's buffer: into its own, or for a fold
into a cache-sized bounce that it folds from.

What a message of ``n`` bytes costs: through mailboxes, two passes over
it (the sender copies it into the mailbox, the receiver copies or folds it
out); read from the sender, one (the kernel copies it from the sender's
pages straight into place, or into the bounce that a fold reads). The
memory sees the same bytes either way (a piece or a bounce stays in cache:
n read on the sender's side, n written and for a fold n more read on the
receiver's), so a 2-rank allreduce of ``s`` bytes (half folded, half
received) moves about 2.5 s through each rank's memory on both; read from
the sender it makes three passes of s/2 instead of four, and a sender's
core is free while its message is read. But the kernel pins the sender's
pages for each read, which costs about what the second copy does while the
buffers stay in cache. Measured side by side on 2 ranks of the development
machine (rabenseifner's persistent requests, best of 15 rounds), reading from
the sender takes 0.6 - 0.7x the mailboxes' time at 1 - 2 MiB out of place and
0.55 - 0.7x in place (in place through mailboxes is then 1.15 - 1.2x MPI's own
in place; read from the sender, 0.85 - 1.0x), and about the same at 640 - 768
KiB, where it is slower in the runs where the virtual machine's memory is
slow; hence :data:`ATTACH_BYTES` (``PYAR_CMA=1``: from any size).

Both give :class:`~.progress.Step` s for a call in flight (:class:`ResidentStep`,
:class:`ProgramStep`); their blocking calls run the native program, or the
steps' derived blocking form.
"""

from __future__ import annotations

import atexit
import os
import weakref
from functools import partial

import numpy as np
from mpi4py import MPI

from ..core.errors import MismatchError, PyarError
from ..kernels import bound_fold, mailbox
from . import notice, shm
from .p2p import (DATA, SCRATCH, SOURCE, CopyStep, Span, check_size, mark, mismatch, overlap,
                  resident_tag)
from .progress import Step

PIECE = 1 << 16             # bytes: a Stream's messages go through mailboxes in pieces of this
ATTACH_BYTES = 1 << 20      # bytes: a Stream of a buffer this large reads from its senders
_BYTE = MPI.BYTE


class _Program:
    """A native mailbox program (:mod:`pyar.kernels.mailbox`): ``program`` (its rows) and,
    per row, ``waits[row]`` = (where, peer, stamps) for errors; ``fingerprint`` and
    ``call`` (the calls' tuple) make and explain its marks; ``channels`` count its calls
    (None once unusable), ``steps`` are None once freed."""

    def _load(self, rows, waits) -> None:
        self.program = np.array(rows, np.int64).reshape(-1, mailbox.WIDTH)
        self.address, self.rows, self.waits = self.program.ctypes.data, len(rows), waits
        # polls before Python takes a wait over: few on an oversubscribed node, where
        # they hold the core that the awaited rank needs
        self.spins = _NATIVE_SPINS if shm.patience() else 1
        self.start_spins = _START_SPINS if shm.patience() else 1
        self.blocking_spins = _BLOCKING_SPINS if shm.patience() else 1
        if _native[0] is None:
            _native[0] = mailbox.runner()

    def _begin(self) -> int:
        """The program's number for the call about to run (PyarError once unusable)."""
        call = 0 if self.channels is None else self.channels.calls
        if call is None or self.steps is None:
            self._gone()
        return call

    @staticmethod
    def _gone():
        raise PyarError("this plan's shared-memory mailboxes or requests are gone: its "
                        "communicator was freed, or a call of it was interrupted by an "
                        "error (the ranks are out of step; make a new communicator)")

    def _end(self, call: int) -> None:
        if self.channels is not None:
            self.channels.calls = call + 1

    def interrupted(self) -> None:
        """A call failed mid-way: its counters are out of step, so no later call runs."""
        if self.channels is not None:
            self.channels.calls = None

    def attempt(self, seq: int, blocking: bool = False):
        """Call number ``seq`` (the communicator's), run as far as the peers allow now (a
        persistent request's start), polling each stamp :data:`_START_SPINS` times, or
        :data:`_BLOCKING_SPINS` for a ``blocking`` call (once on an oversubscribed node):
        None if it completed, else (its program's call number, the row it stopped at), for
        :meth:`execution` to go on from."""
        call = self._begin()
        at = _native[0](self.address, self.rows, 0, call, self.fingerprint, seq,
                        self.blocking_spins if blocking else self.start_spins)
        if at == self.rows:
            self.channels.calls = call + 1
            return None
        if at < 0:
            raise self._failed(at, call, seq)
        return call, at

    def execution(self, seq: int, at: int = 0, call: int | None = None):
        """(steps, ctx, done, abandon) of call number ``seq`` for :class:`~.progress.Run`,
        from row ``at`` of the program's call number ``call`` (None: a new call, from its
        first row): a :class:`ProgramStep` per step of the plan, its rows."""
        if call is None:
            call = self._begin()
        steps = [step if step.first >= at else ProgramStep(self, at, step.last, step.where)
                 for step in self.program_steps if step.last > at]
        return steps, _ProgramCall(call, seq, at), partial(self._end, call), self.interrupted

    def _failed(self, at: int, call: int, seq: int) -> PyarError:
        """The error for the native program's answer ``at`` < 0: a row whose stamp is another
        call's mark (MismatchError), or whose peer's memory could not be read."""
        if at <= mailbox.UNREADABLE:
            where, peer, _ = self.waits[mailbox.UNREADABLE - at]
            self.interrupted()
            return PyarError(f"{where}: reading rank {peer}'s message from its memory "
                             f"(process_vm_readv) failed: that process has ended, or no "
                             f"longer lets this one read it")
        where, peer, stamps = self.waits[-1 - at]
        return mismatch(where, peer, stamps[call & 1][0], mark(self.fingerprint, seq),
                         self.call)


def mailbox_bytes(pool) -> int:
    """The bytes of each of a :class:`Stream`'s mailboxes on ``pool``: an offer and its bounce
    where the ranks read each other's memory, else a piece."""
    return mailbox.BOUNCE_AT + mailbox.BOUNCE if pool.attach else PIECE


class Stream(_Program):
    """A plan larger than :data:`RESIDENT_BYTES` (or its out-of-place variant) run on the
    caller's buffers with every message through a shared-memory mailbox (:mod:`.shm`; every
    rank of the plan on one node): one native program a call.

    A message goes in pieces of at most :data:`PIECE` bytes, the two halves of
    its mailbox alternating, so that the receiver folds piece t - 1 while the
    sender copies piece t in: copied once into shared memory and folded (or
    copied) once out of it, where MPI copies in and out of its own queue and
    the fold then reads a landing buffer. A step's rows go in rounds: round t
    puts piece t of every send, then takes piece t - 1 of every receive; a put
    waits for its half to be taken, two pieces back, which the peer does in its
    round before, so no two ranks wait for each other. An out-of-place
    variant's copies of x are local rows. Reading from the senders (``attach``:
    the ranks read each other's memory, and the buffer is :data:`ATTACH_BYTES`
    or more, or ``PYAR_CMA=1``) a step's rows are instead an OFFER per send
    (where the message lies) and a GET or GET_FOLD per receive (read from the
    sender, folded through a bounce; an out-of-place variant's fold takes x's
    part in the same pass); a sender waits until an offer is taken (TAKEN)
    only before it first writes where it offered, offers in that mailbox
    again, or returns. Marks and errors are a Resident's;
    :meth:`execution` gives the steps (row ranges) for :class:`~.progress.Run`.
    Limits: a step whose receives land where it sends from, or on overlapping
    spans, does not stream (:func:`_streamable`; such a plan sends through MPI).
    """

    def __init__(self, plan, channels: shm.Channels, dtype: np.dtype,
                 reduction: str | None, call=None, scratch: np.ndarray | None = None):
        self.channels, self.call, self.fingerprint = channels, call, notice.fingerprint(call)
        size, each = dtype.itemsize, PIECE // dtype.itemsize
        self.attach = channels.attach == 2 or (channels.attach == 1 and
                                               plan.count * size >= ATTACH_BYTES)
        kind = 0 if reduction is None else mailbox.kind(dtype, reduction)
        self.scratch = plan.buffers(dtype, landing=False)[0] if scratch is None else scratch
        scratch = self.scratch.ctypes.data
        ordinal: dict = {}              # (direction, peer, mailbox): pieces so far a call
        rows, waits, patches, self.steps = [], [], [], []

        def at(span, column, lo):       # byte address in row ``column``: fixed or patched
            offset = lo * size
            if span.buf == SCRATCH:
                return scratch + offset
            patches.append((len(rows), column, span.buf == SOURCE, offset))
            return 0

        def pieces(direction, span):
            """(stamps and halves, lo, hi) of each piece of ``span``, the pair's message k of
            this step (mailbox k)."""
            k = nth[direction, span.peer] = nth.get((direction, span.peer), -1) + 1
            box = (channels.out if direction else channels.into)[span.peer]
            out = []
            for lo in range(span.lo, max(span.hi, span.lo + 1), each):
                n = ordinal.get((direction, span.peer, k), 0)
                ordinal[direction, span.peer, k] = n + 1
                s0, s1, b0, b1 = box.addresses[k]
                out.append(((s0, s1, b0, b1) if n % 2 == 0 else (s1, s0, b1, b0),
                            box.stamps[k] if n % 2 == 0 else box.stamps[k][::-1],
                            lo, min(lo + each, span.hi)))
            return out

        pending = []        # offers not yet waited for: (span, where, peer, stamps' places, stamps)

        def taken(writes=None):
            """TAKEN rows for the pending offers whose span ``writes`` overlaps (None: all): a
            sender waits for its receivers only before it changes what it offered."""
            for offer in [o for o in pending if writes is None or overlap(o[0], writes)]:
                span, where, peer, (s0, s1), stamps = offer
                rows.append([mailbox.TAKEN, s0, s1, 0, 0, 0, 0, 0, 0])
                waits.append((where, peer, stamps))
                pending.remove(offer)

        def offers(step):
            """A step's rows read from the senders' memory: it offers its sends, then gets (or
            gets and folds) its receives."""
            for s in step.sends:
                k = nth[1, s.peer] = nth.get((1, s.peer), -1) + 1
                box = channels.out[s.peer]
                # an OFFER waits for its mailbox's last offer to be taken: that one's TAKEN
                pending[:] = [o for o in pending if o[3] != box.addresses[k][:2]]
                rows.append([mailbox.OFFER, *box.addresses[k], at(s, 5, s.lo),
                             (s.hi - s.lo) * size, os.getpid(), 0])
                waits.append((step.where, s.peer, box.stamps[k]))
                pending.append((s, step.where, s.peer, box.addresses[k][:2], box.stamps[k]))
            for r in step.recvs:
                k = nth[0, r.wire.peer] = nth.get((0, r.wire.peer), -1) + 1
                box = channels.into[r.wire.peer]
                target, n = (r.wire if r.dst is None else r.dst), (r.wire.hi - r.wire.lo) * size
                taken(target)
                x = r.source if r.dst is None else None     # x's part folded in (into target)
                fold = r.fold or x is not None
                rows.append([mailbox.GET_FOLD if fold else mailbox.GET, *box.addresses[k],
                             at(target, 5, target.lo), n, kind if fold else 0,
                             0 if x is None else at(x, 8, x.lo)])
                waits.append((step.where, r.wire.peer, box.stamps[k]))

        for step in plan.steps:
            first = len(rows)
            if isinstance(step, CopyStep):          # x into data: local rows
                for lo, hi in step.ranges:
                    x = Span(None, SOURCE, lo - step.shift, hi - step.shift)
                    to = Span(None, DATA, lo, hi)
                    taken(to)
                    rows.append([mailbox.COPY, 0, 0, at(x, 3, x.lo), at(x, 4, x.lo),
                                 at(to, 5, lo), (hi - lo) * size, 0, 0])
                    waits.append(("", None, None))
                self.steps.append(ProgramStep(self, first, len(rows), "x copied in"))
                continue
            nth = {}                # (direction, peer): the pair's messages so far this step
            if self.attach:
                offers(step)
                self.steps.append(ProgramStep(self, first, len(rows), step.where))
                continue
            puts = [(s, pieces(1, s)) for s in step.sends]
            takes = [(r, pieces(0, r.wire)) for r in step.recvs]
            for t in range(max((len(p) for _, p in puts + takes), default=0) + 1):
                for s, p in puts:
                    if t < len(p):
                        addresses, stamps, lo, hi = p[t]
                        rows.append([mailbox.PUT, *addresses, at(s, 5, lo), (hi - lo) * size, 0,
                                     0])
                        waits.append((step.where, s.peer, stamps))
                for r, p in takes:
                    if 0 < t <= len(p):
                        addresses, stamps, lo, hi = p[t - 1]
                        target, n = (r.wire if r.dst is None else r.dst), (hi - lo) * size
                        lo += target.lo - r.wire.lo
                        rows.append([mailbox.FOLD if r.fold else mailbox.COPY, *addresses,
                                     at(target, 5, lo), n, kind if r.fold else 0, 0])
                        waits.append((step.where, r.wire.peer, stamps))
                        x = r.source
                        if r.dst is None and x is not None:     # then x's part folded in
                            rows.append([mailbox.FOLD, 0, 0, at(x, 3, lo + x.lo - target.lo),
                                         at(x, 4, lo + x.lo - target.lo), at(target, 5, lo),
                                         n, kind, 0])
                            waits.append((step.where, None, None))
            self.steps.append(ProgramStep(self, first, len(rows), step.where))
        if pending:             # the call returns: its buffers are the caller's again
            taken()
            last = self.steps[-1]
            self.steps[-1] = ProgramStep(self, last.first, len(rows), last.where)
        self._load(rows, waits)
        self.program_steps = self.steps
        self.patches = np.array(patches, np.int64).reshape(-1, 4).T   # row, column, x?, offset
        self.bases = None

    def bind(self, data: np.ndarray, source=None) -> None:
        """Point the rows at the next calls' data (and x, ``source``, for a variant)."""
        bases = (data.ctypes.data, 0 if source is None else source.ctypes.data)
        if bases != self.bases:
            row, column, x, offset = self.patches
            self.program[row, column] = offset + np.where(x, bases[1], bases[0])
            self.bases = bases



class _ProgramCall:
    """A native program's call in flight: the program's call number, the call's, the next
    row."""

    __slots__ = ("call", "seq", "at")

    def __init__(self, call, seq, at=0):
        self.call, self.seq, self.at = call, seq, at


class ProgramStep(Step):
    """A step of a native program (a :class:`Stream`'s, or a :class:`Resident`'s whose
    messages are all mailbox ones) for a call in flight: its rows, run as far as their
    stamps allow on each test (``ctx``: the call's :class:`_ProgramCall`)."""

    __slots__ = ("program", "first", "last", "where")

    def __init__(self, program, first, last, where="a step"):
        self.program, self.first, self.last, self.where = program, first, last, where

    def start(self, ctx) -> None:
        ctx.at = max(ctx.at, self.first)

    def test(self, ctx) -> bool:
        program = self.program
        at = _native[0](program.address, self.last, ctx.at, ctx.call, program.fingerprint,
                        ctx.seq, program.spins)
        if at < 0:
            raise program._failed(at, ctx.call, ctx.seq)
        ctx.at = at
        return at == self.last

    def pending(self, ctx) -> list[int]:
        return [self.program.waits[ctx.at][1]] if ctx.at < self.last else []

    def traffic(self) -> tuple[list[int], int, int]:
        """Its peers, and the bytes its rows put into and take out of their mailboxes."""
        program, peers, sent, received = self.program, set(), 0, 0
        for row in range(self.first, self.last):
            peer = program.waits[row][1]
            if peer is None:            # a local copy or fold
                continue
            peers.add(peer)
            nbytes = int(program.program[row, 6])
            if program.program[row, 0] in (mailbox.PUT, mailbox.OFFER):
                sent += nbytes
            else:
                received += nbytes
        return sorted(peers), sent, received


def _copier(dst: np.ndarray, src: np.ndarray):
    """``copy()``: ``dst[...] = src`` for contiguous arrays of one size, bound now (a byte
    copy between memoryviews: a fifth of the time of numpy's for small messages)."""
    return partial(memoryview(dst.view(np.uint8)).__setitem__, slice(None),
                   memoryview(src.view(np.uint8)))


class _Call:
    """A Resident call in flight: the mailbox half it uses, its mark, the channels' memory
    barrier, and how far the current step has got (puts copied out, requests complete)."""

    __slots__ = ("half", "mark", "sync", "put", "complete")

    def __init__(self, call, channels, mark=0):
        self.half, self.mark = call & 1, mark
        self.sync = None if channels is None else channels.sync
        self.put, self.complete = 0, []


class ResidentStep(Step):
    """A step of a :class:`Resident`: mailbox sends copied out and stamped, persistent
    requests started, then (once they are complete and the mailbox receives stamped) sizes
    and stamps checked and every fold and copy in the schedule's order, straight from the
    mailboxes, which it then clears (:mod:`.shm`). Each request is started and tested on its
    own: cheaper in mpi4py than MPI_Startall and MPI_Testall on a list, and as safe, since
    every request of the step is started before any test. ``ctx`` is the call's
    :class:`_Call`."""

    __slots__ = ("where", "requests", "statuses", "checks", "finishes", "puts", "boxes",
                 "peers", "call")

    def __init__(self, where, requests, peers, received, finishes, puts, boxes, call):
        self.where, self.requests, self.peers, self.finishes = where, requests, peers, finishes
        self.puts, self.boxes = puts, boxes     # (peer, stamps, copies, nbytes), (peer, stamps, nbytes)
        self.call = call
        self.statuses = [MPI.Status() if i < len(received) else None
                         for i in range(len(requests))]
        self.checks = [(self.statuses[i], view.nbytes, view, peer)
                       for i, view, peer in received]

    def start(self, ctx: _Call) -> None:
        ctx.put, ctx.complete = 0, [False] * len(self.requests)
        self._put(ctx)
        for request in self.requests:
            request.Start()

    def _put(self, ctx: _Call) -> bool:
        """Copy out and stamp the mailbox sends whose halves are free, in order; whether all
        are out."""
        puts, half = self.puts, ctx.half
        while ctx.put < len(puts):
            _, stamps, copies, _ = puts[ctx.put]
            stamp = stamps[half]
            if stamp[0]:
                return False
            copies[half]()
            if ctx.sync is not None:
                ctx.sync()
            stamp[0] = ctx.mark
            ctx.put += 1
        return True

    def test(self, ctx: _Call) -> bool:
        if ctx.put < len(self.puts) and not self._put(ctx):
            return False
        complete = ctx.complete
        for i, request in enumerate(self.requests):
            if not complete[i]:
                if not request.Test(self.statuses[i]):
                    return False
                complete[i] = True
        half = ctx.half
        return all(stamps[half][0] for _, stamps, _ in self.boxes)

    def finish(self, ctx: _Call) -> None:
        for status, nbytes, view, peer in self.checks:
            if status.Get_count(_BYTE) != nbytes:
                check_size(status, view, peer, self.where)
        half, mark = ctx.half, ctx.mark
        if self.boxes:
            for peer, stamps, _ in self.boxes:
                if stamps[half][0] != mark:
                    raise mismatch(self.where, peer, stamps[half][0], mark, self.call)
            if ctx.sync is not None:
                ctx.sync()
        for finish in self.finishes:
            finish[half]()
        if self.boxes:
            if ctx.sync is not None:
                ctx.sync()
            for _, stamps, _ in self.boxes:
                stamps[half][0] = 0

    def pending(self, ctx: _Call) -> list[int]:
        peers = {put[0] for put in self.puts[ctx.put:]}
        peers |= {peer for peer, stamps, _ in self.boxes if not stamps[ctx.half][0]}
        peers |= {p for p, done in zip(self.peers, ctx.complete) if not done}
        return sorted(peers)


class Resident(_Program):
    """A plan bound to buffers: ``data`` (``plan.count`` elements: its own, or a caller's 1-D
    contiguous array that then must outlive it), scratch and landing of its own, every
    message to a rank of this node a mailbox (:mod:`.shm`, when ``channels`` has one) and
    every other one a persistent request, every fold a kernel bound to its views.

    A step copies its mailbox sends out, starts its requests, waits for them
    and for its mailbox receives, checks the size of what came through MPI,
    then folds and copies in the schedule's order, straight from the
    mailboxes. ``call`` is the tuple of the calls it runs (collective, op,
    dtype, count, root, algorithm): every mailbox message is stamped with its
    fingerprint (:func:`.notice.fingerprint`) and number (:func:`mark`), and a receiver
    that finds another stamp raises MismatchError; all persistent requests use its tag (:func:`resident_tag`),
    which a message of another call never matches (the stall is diagnosed by
    :mod:`.notice`). A plan is resident by its size alone, the same on every
    rank, and messages between two ranks on pyar's private communicator match
    in the order they were sent, so one tag cannot confuse two calls. The
    requests are freed with the object.
    """

    def __init__(self, plan, comm: MPI.Comm, dtype: np.dtype, reduction: str | None,
                 data: np.ndarray | None = None, channels: shm.Channels | None = None,
                 call=None, source: np.ndarray | None = None):
        self.data = np.empty(plan.count, dtype) if data is None else data
        self.channels, self.call = channels, call
        self.bufs = bufs = (self.data, np.empty(plan.scratch_count, dtype),
                            np.empty(plan.landing_count, dtype))
        out = {} if channels is None else channels.out
        into = {} if channels is None else channels.into
        sent, taken = dict.fromkeys(out, 0), dict.fromkeys(into, 0)    # messages so far a call
        tag = resident_tag(notice.fingerprint(call))
        kind = 0 if reduction is None else mailbox.kind(dtype, reduction)  # a native fold's

        self.steps, rows, waits = [], [], []    # rows, waits: the native program's
        bounds = []                             # (where, first row, end) of each step's rows
        for where, sends, recvs in plan.spans:
            first = len(rows)
            requests, peers, received, finishes, puts, boxes = [], [], [], [], [], []
            takes = []
            for wire, dst, fold, _ in recvs:
                box = into.get(wire.peer)
                if box is not None:     # straight from the mailbox to where it ends
                    end = wire if dst is None else dst
                    target = bufs[end.buf][end.lo:end.hi]
                    k = taken[wire.peer]
                    taken[wire.peer] += 1
                    boxes.append((wire.peer, box.stamps[k], target.nbytes))
                    finishes.append(tuple(bound_fold(target, v, reduction) if fold else
                                          _copier(target, v) for v in box.halves(k, dtype)))
                    takes.append(((mailbox.FOLD if fold else mailbox.COPY, *box.addresses[k],
                                   target.ctypes.data, target.nbytes, kind if fold else 0, 0),
                                  (where, wire.peer, box.stamps[k])))
                    continue
                view = bufs[wire.buf][wire.lo:wire.hi]
                requests.append(comm.Recv_init([view, _BYTE], wire.peer, tag))
                peers.append(wire.peer)
                received.append((len(requests) - 1, view, wire.peer))
                if dst is not None:
                    target = bufs[dst.buf][dst.lo:dst.hi]
                    finish = (bound_fold(target, view, reduction) if fold else
                              _copier(target, view))
                    finishes.append((finish, finish))
            for s in sends:
                view = bufs[s.buf][s.lo:s.hi]
                box = out.get(s.peer)
                if box is None:
                    requests.append(comm.Send_init([view, _BYTE], s.peer, tag))
                    peers.append(s.peer)
                    continue
                k = sent[s.peer]
                sent[s.peer] += 1
                puts.append((s.peer, box.stamps[k],
                             tuple(_copier(v, view) for v in box.halves(k, dtype)), view.nbytes))
                rows.append((mailbox.PUT, *box.addresses[k], view.ctypes.data, view.nbytes, 0,
                             0))
                waits.append((where, s.peer, box.stamps[k]))
            for row, wait in takes:
                rows.append(row)
                waits.append(wait)
            bounds.append((where, first, len(rows)))
            self.steps.append(ResidentStep(where, requests, peers, received, finishes, puts,
                                             boxes, call))
        self.fingerprint = notice.fingerprint(call)
        # every message a mailbox: the whole call runs natively (kernels.mailbox)
        # start: the first row of a call that does not fill data from source (run's fill)
        self.program, self.source, self.start, self.program_steps = None, None, 0, []
        if channels is not None and not any(step.requests for step in self.steps):
            if source is not None:      # a local row, no wait: data = source (run(fill=True))
                self.source, self.start = source, 1
                rows.insert(0, (mailbox.COPY, 0, 0, source.ctypes.data, source.ctypes.data,
                                self.data.ctypes.data, self.data.nbytes, 0, 0))
                waits.insert(0, ("", None, None))
            self._load(rows, waits)
            self.program_steps = [ProgramStep(self, first + self.start if i else 0,
                                              end + self.start, where)
                                  for i, (where, first, end) in enumerate(bounds)]
        _LIVE.add(self)

    def refill(self, source: np.ndarray) -> None:
        """Copy data from ``source`` from now on (a program with a source row: C-contiguous,
        as many bytes as data, apart from it, kept alive by this object)."""
        self.source = source
        self.program[0, 3] = self.program[0, 4] = source.ctypes.data

    def execution(self, seq: int = 0, at: int = 0, call: int | None = None):
        """(steps, ctx, done, abandon) of call number ``seq`` as :class:`~.progress.Run` drives
        them: the native program's rows from row ``at`` of its call ``call`` (None: a new
        call; the fill row included when it has a ``source``) where it has one, else the
        Python steps (the caller fills ``data``). ``done()`` ends the call."""
        if self.program is not None:
            return super().execution(seq, at, call)
        call = self._begin()
        ctx = _Call(call, self.channels, mark(self.fingerprint, seq))
        return self.steps, ctx, partial(self._end, call), self.interrupted

    def free(self) -> None:
        """Free the persistent requests (idempotent; running the object afterwards raises)."""
        if not MPI.Is_finalized():
            for step in self.steps or ():
                for request in step.requests:
                    if request:
                        request.Free()
        self.steps = None

    __del__ = free


_LIVE: weakref.WeakSet = weakref.WeakSet()      # Residents with requests to free
_native = [None]            # kernels.mailbox's runner, loaded with the first native program
_NATIVE_SPINS = 1024        # polls of a stamp (~1 us) in the program before Python waits
_START_SPINS = 1 << 13      # polls of a stamp (~5 us) in a start's program before it returns
                            # (the peers of a small call arrive within a few microseconds)
_BLOCKING_SPINS = 1 << 16   # polls (~40 us) in a blocking call's program before Python's wait
                            # takes over: it would only wait on, at the cost of a run's set-up
                            # (~10 us), and a late rank's longer call makes the next call's
                            # peers late in turn (on 2 ranks with a 5 us budget, up to a third
                            # of one rank's small calls go on in Python, each twice as long)


@atexit.register            # runs before mpi4py's MPI_Finalize, a C-level exit hook
def _free_residents():
    for resident in list(_LIVE):
        resident.free()
