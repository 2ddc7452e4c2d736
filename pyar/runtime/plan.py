"""The MPI executor: runs one rank's schedule with mpi4py's buffer-based point-to-point calls.

The only place in pyar that posts MPI messages. A rank's schedule is compiled
once into a :class:`Plan` (cached on the :class:`pyar.Comm`) and then run on
each call with no schedule building: a step of one send and one receive
becomes one ``MPI_Sendrecv``, a lone send or receive a blocking call, any
other step ``Isend``/``Irecv`` and one wait. Receives that fold, or that land
on a chunk the same step sends, go through a landing buffer and take effect
when the step ends; all others land in place. Scratch and landing buffers are
allocated once per plan and dtype and reused.

Plans of buffers up to :data:`RESIDENT_BYTES` run instead on a buffer the plan
owns, :class:`Resident`: every message to a rank of the same node goes
through a shared-memory mailbox (:mod:`.shm`), every other one is a
persistent request (``MPI_Send_init``/``MPI_Recv_init``), every fold a kernel
bound to its views, all made once; a call copies in, runs each step, copies
out. When every message of the plan is a mailbox one (its ranks on one
node), the call's steps are one native program (:mod:`pyar.kernels.mailbox`):
a single call from Python, where a small call's time is Python's, not the
wire's; and above MPI's eager limit the mailboxes also beat MPI's own
shared-memory transfers (BENCHMARKS.md: 128 KiB - 512 KiB in place 0.5x -
0.8x MPI_Allreduce's time, 1.0x - 1.5x through MPI requests).

A larger plan whose every message, on every rank, can go through a mailbox
(its ranks on one node) runs as a :class:`Stream`: the same native program
on the caller's own buffers, each message streamed through a mailbox in
pieces of :data:`PIECE` bytes, copied once into shared memory and folded
straight out of it (MPI copies twice, and the fold reads a landing buffer).

A large out-of-place call runs the plan's :meth:`Plan.out_of_place` variant,
which reads the caller's x itself where the schedule reads data that nothing
has written yet, instead of copying x into the result first.

Messages travel as MPI_BYTE: a schedule moves bytes, and the reduction is
pyar's own (:mod:`pyar.kernels`).
"""

from __future__ import annotations

import atexit
import copy
import weakref
from functools import partial
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from ..core.errors import MismatchError, PyarError, ScheduleError
from ..kernels import bound_fold, folder, mailbox
from ..core.schedule import Schedule
from ..model.cost import RESIDENT_BYTES
from . import notice, progress, shm

DATA, SCRATCH, LANDING, SOURCE = 0, 1, 2, 3     # SOURCE: x, in an out-of-place variant
_BUFFER = {"data": DATA, "scratch": SCRATCH}
_BYTE = MPI.BYTE
PIECE = 1 << 16             # bytes: a Stream's messages go through mailboxes in pieces of this
SPARES = 4                  # scratch and landing buffers a plan keeps for its next requests


class _Span(NamedTuple):
    peer: int
    buf: int
    lo: int
    hi: int


class _Recv(NamedTuple):
    wire: _Span            # where MPI writes
    dst: _Span | None      # where a landed message goes at the end of the step, else None
    fold: bool
    source: _Span | None = None     # x's elements folded into the wire's once it has landed


def _overlap(a: _Span, b: _Span) -> bool:
    """Whether two non-empty spans share elements of one buffer."""
    return a.buf == b.buf and a.lo < b.hi and b.lo < a.hi and a.lo < a.hi and b.lo < b.hi


def _finish(recv: _Recv, bufs, fold):
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
    least, 32767: 6 and 8), ``s`` 0 for a :class:`Resident`'s persistent requests, else
    the call's sequence number wrapped into ``[1, 2**sequence bits)``. A message whose tag
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


def _complete(requests, statuses) -> None:
    """The lean path's wait for ``requests``: no deadline, but through the one wait once it
    stalls (where a peer's failure or a mismatched call is noticed: :mod:`.notice`)."""
    if not MPI.Request.Testall(requests, statuses):
        progress.wait_for(partial(MPI.Request.Testall, requests, statuses), None, None)


def _mark(fingerprint: int, seq: int) -> int:
    """A mailbox half's stamp for a call: its fingerprint and (31 bits of) its sequence
    number (never 0, the stamp of a free half: a fingerprint is odd); as a native program
    makes it (:mod:`pyar.kernels.mailbox`)."""
    return fingerprint | (seq & 0x7FFFFFFF) << 32


def _mismatch(where: str, peer: int, theirs: int, mine: int, call) -> MismatchError:
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


def _check_size(status: MPI.Status, view, peer: int, where: str):
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


class _Step:
    """A step of the general path: the step protocol of :mod:`.progress` over Isend/Irecv
    (receives posted first), and :meth:`run`, its lean blocking form."""

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
            _check_size(status, view, r.wire.peer, self.where)
            if r.dst is not None or r.source is not None:
                _finish(r, bufs, fold)
        if ctx.after is not None:
            ctx.after()

    def pending(self, ctx: Context) -> list[int]:
        peers = [r.wire.peer for r in self.recvs] + [s.peer for s in self.sends]
        return sorted({p for p, q in zip(peers, ctx.requests) if q and not q.Get_status()})

    def run(self, bufs, comm, tag, fold):
        """Post every receive, then every send, wait for all, then finish."""
        ctx = Context(bufs, comm, tag, fold)
        self.start(ctx)
        _complete(ctx.requests, ctx.statuses)
        self.finish(ctx)


class _Exchange(_Step):
    """One send and one receive, on the lean path (flat)."""

    __slots__ = ("statuses", "sbuf", "slo", "shi", "speer", "wbuf", "wlo", "whi", "wpeer",
                 "recv", "dst", "source")

    def __init__(self, where, send, recv):
        super().__init__(where, [send], [recv])
        self.statuses, self.recv = [MPI.Status(), MPI.Status()], recv
        self.speer, self.sbuf, self.slo, self.shi = send
        self.wpeer, self.wbuf, self.wlo, self.whi = recv.wire
        self.dst, self.source = recv.dst, recv.source

    def run(self, bufs, comm, tag, fold):
        into = bufs[self.wbuf][self.wlo:self.whi]
        statuses = self.statuses
        _complete([comm.Irecv([into, _BYTE], self.wpeer, tag),
                   comm.Isend([bufs[self.sbuf][self.slo:self.shi], _BYTE], self.speer, tag)],
                  statuses)
        status = statuses[0]
        if status.Get_count(_BYTE) != into.nbytes:
            _check_size(status, into, self.wpeer, self.where)
        d = self.dst
        if d is not None:
            if self.recv.fold:
                fold(bufs[d.buf][d.lo:d.hi], into)
            else:
                bufs[d.buf][d.lo:d.hi] = into
        elif self.source is not None:
            s = self.source
            fold(into, bufs[SOURCE][s.lo:s.hi])


class _SendOnly(_Step):
    __slots__ = ()

    def run(self, bufs, comm, tag, fold):
        s = self.sends[0]
        _complete([comm.Isend([bufs[s.buf][s.lo:s.hi], _BYTE], s.peer, tag)], None)


class _RecvOnly(_Step):
    __slots__ = ("status",)

    def __init__(self, where, sends, recvs):
        super().__init__(where, sends, recvs)
        self.status = MPI.Status()

    def run(self, bufs, comm, tag, fold):
        r = self.recvs[0]
        w = r.wire
        into = bufs[w.buf][w.lo:w.hi]
        _complete([comm.Irecv([into, _BYTE], w.peer, tag)], [self.status])
        _check_size(self.status, into, w.peer, self.where)
        if r.dst is not None or r.source is not None:
            _finish(r, bufs, fold)


class _Copy:
    """Out-of-place variant: x's elements copied into data where the schedule is about to use
    what data held before anything was written to it (or, at the end, never wrote it). No
    transfers: complete as soon as it starts."""

    __slots__ = ("ranges",)

    def __init__(self, ranges):
        self.ranges = ranges

    def start(self, ctx):
        pass

    def test(self, ctx):
        return True

    def finish(self, ctx):
        self.run(ctx.bufs, None, None, None)

    def pending(self, ctx):
        return []

    def run(self, bufs, comm, tag, fold):
        data, source = bufs[DATA], bufs[SOURCE]
        for lo, hi in self.ranges:
            data[lo:hi] = source[lo:hi]


def _unwritten(written: np.ndarray, lo: int, hi: int) -> list[tuple[int, int]]:
    """The runs of ``[lo, hi)`` that ``written`` marks False, as (lo, hi) ranges."""
    mask = np.concatenate(([True], written[lo:hi], [True]))
    edges = np.flatnonzero(mask[1:] != mask[:-1]) + lo
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


class Plan:
    """One rank's schedule compiled for this executor, with its reusable buffers."""

    def __init__(self, schedule: Schedule, rank: int):
        self.count, self.rank = schedule.count, rank
        self.scratch_count = schedule.scratch_count(rank)
        self.ops = [([_Span(op.peer, _BUFFER[op.chunk.buffer], op.chunk.lo, op.chunk.hi)
                      for op in step.sends],
                     [(_Span(op.peer, _BUFFER[op.chunk.buffer], op.chunk.lo, op.chunk.hi),
                       op.reduce) for op in step.recvs])
                    for step in schedule.steps(rank)]
        self.source = False
        self.base = self            # (its out-of-place variant's base is this plan)
        self._compile(None)
        self._variant = None

    def _compile(self, written):
        """Compile ``ops`` into ``steps`` (and ``spans``: per step (where, sends, recvs)).

        ``written`` is None, or for the out-of-place variant a mask of the data
        elements written so far: a send of elements not yet written reads them
        from x, a fold into them receives in place and folds x's in (the
        kernels are commutative bit for bit), and x is copied into data only
        where a step needs both (or the schedule never writes)."""
        self.landing_count, self.spans, self.steps = 0, [], []
        self._buffers, self._folds, self._residents, self._streams = {}, {}, {}, {}
        if written is None:
            self._channels = {}     # (a variant's mailboxes are its base's)
        self._spare: dict = {}      # dtype -> (scratch, landing) pairs of finished requests
        self._bound = weakref.WeakSet()
        for i, (sends, recvs) in enumerate(self.ops):
            where = f"rank {self.rank} step {i}"
            before = []
            if written is not None:
                sends = [self._read_from(s, written, before) for s in sends]
            compiled, landed = [], 0
            for span, reduce in recvs:
                if written is not None and span.buf == DATA:
                    direct = (reduce and not written[span.lo:span.hi].any()
                              and not any(_overlap(span, s) for s in sends))
                    if reduce and not direct:
                        before += _unwritten(written, span.lo, span.hi)
                    written[span.lo:span.hi] = True     # a second fold there lands apart
                    if direct:
                        compiled.append(_Recv(span, None, False,
                                              span._replace(buf=SOURCE)))
                        continue
                if reduce or any(_overlap(span, s) for s in sends):
                    n = span.hi - span.lo
                    compiled.append(_Recv(_Span(span.peer, LANDING, landed, landed + n), span,
                                          reduce))
                    landed += n
                else:
                    compiled.append(_Recv(span, None, False))
            if before:
                self.steps.append(_Copy(before))
            self.landing_count = max(self.landing_count, landed)
            self.spans.append((where, sends, compiled))
            self.steps.append(self._step(where, sends, compiled))
        if written is not None and not written.all():
            self.steps.append(_Copy(_unwritten(written, 0, self.count)))

    @staticmethod
    def _read_from(send: _Span, written, before) -> _Span:
        """Where the out-of-place variant sends ``send`` from: x while none of it is written,
        else data (x's part copied in first, into ``before``)."""
        if send.buf != DATA:
            return send
        part = written[send.lo:send.hi]
        if not part.any():
            return send._replace(buf=SOURCE)
        if not part.all():
            before += _unwritten(written, send.lo, send.hi)
            part[...] = True
        return send

    @staticmethod
    def _step(where, sends, recvs):
        if len(sends) == 1 and len(recvs) == 1:
            return _Exchange(where, sends[0], recvs[0])
        if len(sends) == 1 and not recvs:
            return _SendOnly(where, sends, recvs)
        if len(recvs) == 1 and not sends:
            return _RecvOnly(where, sends, recvs)
        return _Step(where, sends, recvs)

    def out_of_place(self) -> Plan:
        """This plan's variant that reads x where the caller's data buffer is not x (built
        here, once: every rank sends and receives the same messages either way)."""
        if self._variant is None:
            variant = copy.copy(self)
            variant.source = True
            variant._compile(np.zeros(self.count, bool))
            self._variant = variant
        return self._variant

    def buffers(self, dtype: np.dtype, landing: bool = True):
        """The (scratch, landing) arrays of ``dtype`` for this plan, each allocated once when
        first asked for (landing None unless ``landing``: a Stream lands nothing)."""
        found = self._buffers.get(dtype)
        if found is None or landing and found[1] is None:
            found = self._buffers[dtype] = (
                np.empty(self.scratch_count, dtype) if found is None else found[0],
                np.empty(self.landing_count, dtype) if landing else None)
        return found

    def small(self, dtype: np.dtype) -> bool:
        """Whether this plan's buffer of ``dtype`` is at most :data:`RESIDENT_BYTES` (a
        Resident's, else a Stream's or MPI's): every rank decides alike."""
        return self.count * dtype.itemsize <= RESIDENT_BYTES

    def resident(self, comm: MPI.Comm, dtype: np.dtype, reduction: str | None, call=None):
        """The :class:`Resident` of this plan for ``dtype``, ``reduction`` and the calls
        ``call`` (a tuple: :func:`.notice.fingerprint`) if its buffer is at most
        :data:`RESIDENT_BYTES` (every rank decides alike), else None. Made on the first call
        with them, which every rank makes: collective."""
        key = (dtype, reduction, call)
        found = self._residents.get(key)
        if found is None and key not in self._residents:
            small = self.small(dtype) and not self.source
            found = self._residents[key] = (
                Resident(self, comm, dtype, reduction, None, self._mailboxes(comm, dtype),
                         call)
                if small else None)
        return found

    def _mailboxes(self, comm: MPI.Comm, dtype: np.dtype) -> shm.Channels | None:
        """This plan's shared-memory channels for ``dtype``'s element size (collective once),
        its variant's too: a Resident's up to :data:`RESIDENT_BYTES`, a :class:`Stream`'s
        above."""
        size = dtype.itemsize
        if size not in self._channels:
            pool = shm.pool_of(comm)
            if pool is None:
                self._channels[size] = None
            elif self.small(dtype):
                self._channels[size] = pool.channels(self.spans, size)
            else:
                self._channels[size] = pool.streams(self.spans, PIECE, _streamable(self.spans))
        return self._channels[size]

    def stream(self, comm: MPI.Comm, dtype: np.dtype, reduction: str | None, call=None):
        """The :class:`Stream` of this plan (or its variant) for ``dtype``, ``reduction`` and
        the calls ``call`` if its buffer is larger than :data:`RESIDENT_BYTES` and every
        message of every rank can go through a mailbox, else None (every rank alike). Made
        on the first call with them, which every rank makes: collective."""
        key = (dtype, reduction, call)
        found = self._streams.get(key)
        if found is None and key not in self._streams:
            channels = None if self.small(dtype) else self.base._mailboxes(comm, dtype)
            found = self._streams[key] = (
                None if channels is None else
                Stream(self, channels, dtype, reduction, call))
        return found

    def bind(self, comm: MPI.Comm, data: np.ndarray, reduction: str | None,
             call=None, source: np.ndarray | None = None) -> Resident:
        """A :class:`Resident` running in ``data`` itself (1-D, contiguous, ``count`` elements,
        kept alive by it), freed with this plan at the latest; after a call of :meth:`run`
        with its dtype and ``reduction`` (not collective itself). ``source`` (C-contiguous,
        as many bytes, apart from ``data``, kept alive too): where a call may have its
        program copy ``data``'s contents from (see :meth:`Resident.run`)."""
        if data.dtype.itemsize not in self._channels:
            raise RuntimeError("Plan.bind: run the plan once with this dtype first (its "
                               "mailboxes are set up then, collectively)")
        resident = Resident(self, comm, data.dtype, reduction, data,
                            self._channels[data.dtype.itemsize], call, source)
        self._bound.add(resident)
        return resident

    def free(self) -> None:
        """Free the MPI resources held (the Residents' requests)."""
        for resident in [*self._residents.values(), *self._bound]:
            if resident is not None:
                resident.free()
        self._residents.clear()

    def fold(self, dtype: np.dtype, reduction: str | None):
        """The host kernel folding ``reduction`` on ``dtype`` (None if nothing folds)."""
        fold = self._folds.get((dtype, reduction))
        if fold is None and reduction is not None:
            fold = self._folds[dtype, reduction] = folder(dtype, reduction)
        return fold

    def run(self, comm: MPI.Comm, tag: int, data: np.ndarray, reduction: str | None,
            source: np.ndarray | None = None, call=None, seq: int = 0) -> None:
        """Run the steps on ``data`` (1-D, contiguous, ``schedule.count`` elements), folding
        with ``reduction`` (``"sum" "prod" "max" "min"``; None if nothing folds), each on
        its lean blocking path. The out-of-place variant takes x as ``source`` (like data,
        not overlapping it) and leaves x's contents there untouched. ``call``, ``seq``: the
        call's tuple and number (for a Resident; ``tag`` carries them otherwise)."""
        dtype = data.dtype
        resident = self.resident(comm, dtype, reduction, call)
        if resident is not None:
            resident.data[...] = data
            resident.run(None, seq)
            data[...] = resident.data
            return
        stream = self.stream(comm, dtype, reduction, call)
        if stream is not None:
            stream.run(data, source, seq)
            return
        bufs = (data, *self.buffers(dtype), source)
        fold = self.fold(dtype, reduction)
        for step in self.steps:
            step.run(bufs, comm, tag, fold)

    def execution(self, comm: MPI.Comm, tag: int, data: np.ndarray, reduction: str | None,
                  source: np.ndarray | None = None, alone: bool = True,
                  call=None, seq: int = 0):
        """(steps, ctx, done, abandon) of one call on ``data`` as :class:`~.progress.Run`
        drives them (arguments as for :meth:`run`); ``done()`` ends it, ``abandon()`` is
        for a call that failed (either may be None). ``alone``: no other call of
        this plan is in flight until it ends (a blocking call), so a small plan runs on its
        Resident and a large one on the plan's scratch; otherwise (a nonblocking call) on
        the general path with buffers of its own (kept for later requests when it ends)."""
        dtype = data.dtype
        if alone:
            resident = self.resident(comm, dtype, reduction, call)
            if resident is not None:
                resident.data[...] = data
                steps, ctx, end = resident.execution(seq)

                def done():
                    end()
                    data[...] = resident.data
                return steps, ctx, done, resident.interrupted
            stream = self.stream(comm, dtype, reduction, call)
            if stream is not None:
                return stream.execution(data, source, seq)
            own, done = self.buffers(dtype), None
        else:       # buffers no other call in flight uses: a spare, or new (page faults)
            spare = self._spare.setdefault(dtype, [])
            own = spare.pop() if spare else (np.empty(self.scratch_count, dtype),
                                             np.empty(self.landing_count, dtype))

            def done():
                if len(spare) < SPARES:
                    spare.append(own)
        return (self.steps, Context((data, *own, source), comm, tag,
                                    self.fold(dtype, reduction)), done, None)


def _streamable(spans) -> bool:
    """Whether a :class:`Stream` may interleave the pieces of each step's messages: no
    receive lands where the step sends from, and the step's receives land on the same
    span or apart (so that every element is folded in the schedule's order)."""
    for _, sends, recvs in spans:
        targets = [r.wire if r.dst is None else r.dst for r in recvs]
        for i, t in enumerate(targets):
            if any(_overlap(t, s) for s in sends) or any(
                    _overlap(t, u) and t[1:] != u[1:] for u in targets[:i]):
                return False
    return True


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

    def _resume(self, at: int, call: int, seq: int, deadline) -> None:
        """Go on with the native program of ``call`` (the program's number) number ``seq``
        (the communicator's) from row ``at``, where it stopped, waiting
        :func:`~.shm.patiently` (bounded by ``deadline``); another call's mark is a
        MismatchError."""
        native, address, rows, fingerprint = _native[0], self.address, self.rows, \
            self.fingerprint
        state = [at]

        def advanced(spins=1) -> bool:
            at = native(address, rows, state[0], call, fingerprint, seq, spins)
            if at < 0:
                raise self._mismatched(-1 - at, call, seq)
            state[0] = at
            return at == rows

        if at < 0:
            raise self._mismatched(-1 - at, call, seq)
        shm.patiently(advanced, deadline,
                      lambda waited: shm.gave_up(*self.waits[state[0]][:2])(waited),
                      partial(advanced, _NATIVE_SPINS))

    def _mismatched(self, row: int, call: int, seq: int) -> MismatchError:
        """The error for the native program's ``row``, whose stamp is another call's mark."""
        where, peer, stamps = self.waits[row]
        return _mismatch(where, peer, stamps[call & 1][0], _mark(self.fingerprint, seq),
                         self.call)


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
    variant's copies of x are local rows. Marks and errors are a Resident's;
    :meth:`execution` gives the steps (row ranges) for :class:`~.progress.Run`.
    Limits: a step whose receives land where it sends from, or on overlapping
    spans, does not stream (:func:`_streamable`; such a plan sends through MPI).
    """

    def __init__(self, plan: Plan, channels: shm.Channels, dtype: np.dtype,
                 reduction: str | None, call=None):
        self.channels, self.call, self.fingerprint = channels, call, notice.fingerprint(call)
        size, each = dtype.itemsize, PIECE // dtype.itemsize
        kind = 0 if reduction is None else mailbox.kind(dtype, reduction)
        scratch = plan.buffers(dtype, landing=False)[0].ctypes.data     # (kept by the plan)
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

        for step in plan.steps:
            first = len(rows)
            if isinstance(step, _Copy):          # x into data: local rows
                for lo, hi in step.ranges:
                    x, to = _Span(None, SOURCE, lo, hi), _Span(None, DATA, lo, hi)
                    rows.append([mailbox.COPY, 0, 0, at(x, 3, lo), at(x, 4, lo), at(to, 5, lo),
                                 (hi - lo) * size, 0])
                    waits.append(("", None, None))
                self.steps.append(_StreamStep(self, first, len(rows)))
                continue
            nth = {}                # (direction, peer): the pair's messages so far this step
            puts = [(s, pieces(1, s)) for s in step.sends]
            takes = [(r, pieces(0, r.wire)) for r in step.recvs]
            for t in range(max((len(p) for _, p in puts + takes), default=0) + 1):
                for s, p in puts:
                    if t < len(p):
                        addresses, stamps, lo, hi = p[t]
                        rows.append([mailbox.PUT, *addresses, at(s, 5, lo), (hi - lo) * size, 0])
                        waits.append((step.where, s.peer, stamps))
                for r, p in takes:
                    if 0 < t <= len(p):
                        addresses, stamps, lo, hi = p[t - 1]
                        target, n = (r.wire if r.dst is None else r.dst), (hi - lo) * size
                        lo += target.lo - r.wire.lo
                        rows.append([mailbox.FOLD if r.fold else mailbox.COPY, *addresses,
                                     at(target, 5, lo), n, kind if r.fold else 0])
                        waits.append((step.where, r.wire.peer, stamps))
                        x = r.source
                        if r.dst is None and x is not None:     # then x's part folded in
                            rows.append([mailbox.FOLD, 0, 0, at(x, 3, lo + x.lo - target.lo),
                                         at(x, 4, lo + x.lo - target.lo), at(target, 5, lo),
                                         n, kind])
                            waits.append((step.where, None, None))
            self.steps.append(_StreamStep(self, first, len(rows)))
        self._load(rows, waits)
        self.patches = np.array(patches, np.int64).reshape(-1, 4).T   # row, column, x?, offset
        self.bases = None

    def _bind(self, data: np.ndarray, source) -> None:
        """Point the rows at this call's data (and x)."""
        bases = (data.ctypes.data, 0 if source is None else source.ctypes.data)
        if bases != self.bases:
            row, column, x, offset = self.patches
            self.program[row, column] = offset + np.where(x, bases[1], bases[0])
            self.bases = bases

    def run(self, data: np.ndarray, source, seq: int) -> None:
        """One call, number ``seq`` on its communicator, on ``data`` (and x, ``source``, for
        a variant): the lean path (no deadline; :meth:`execution` for one)."""
        call = self._begin()
        self._bind(data, source)
        try:
            at = _native[0](self.address, self.rows, 0, call, self.fingerprint, seq, self.spins)
            if at != self.rows:
                self._resume(at, call, seq, None)
        except BaseException:
            self.interrupted()
            raise
        self._end(call)

    def execution(self, data: np.ndarray, source, seq: int):
        """(steps, ctx, done, abandon) of call number ``seq`` as :meth:`Plan.execution` gives
        them: a step per step of the plan, its rows."""
        call = self._begin()
        self._bind(data, source)
        return self.steps, _StreamCall(call, seq), partial(self._end, call), self.interrupted


class _StreamCall:
    """A Stream's call in flight: the program's call number, the call's, the next row."""

    __slots__ = ("call", "seq", "at")

    def __init__(self, call, seq):
        self.call, self.seq, self.at = call, seq, 0


class _StreamStep:
    """A step of a :class:`Stream` for :class:`~.progress.Run`: its rows, run as far as
    their stamps allow on each test."""

    __slots__ = ("stream", "first", "last")

    def __init__(self, stream, first, last):
        self.stream, self.first, self.last = stream, first, last

    def start(self, ctx) -> None:
        ctx.at = self.first

    def test(self, ctx) -> bool:
        stream = self.stream
        at = _native[0](stream.address, self.last, ctx.at, ctx.call, stream.fingerprint,
                        ctx.seq, 1)
        if at < 0:
            raise stream._mismatched(-1 - at, ctx.call, ctx.seq)
        ctx.at = at
        return at == self.last

    def finish(self, ctx) -> None:
        pass

    def pending(self, ctx) -> list[int]:
        return [self.stream.waits[ctx.at][1]] if ctx.at < self.last else []


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


class _ResidentStep:
    """A step of a :class:`Resident`: mailbox sends copied out and stamped, persistent
    requests started, then (once they are complete and the mailbox receives stamped) sizes
    and stamps checked and every fold and copy in the schedule's order, straight from the
    mailboxes, which it then clears (:mod:`.shm`).

    ``run`` is the lean path (of a Resident that also has MPI requests; one
    whose messages all go through mailboxes runs its native program
    instead). Each request is started and waited for on its
    own: cheaper in mpi4py than MPI_Startall and MPI_Waitall on a list (0.5
    against 0.8 us for a send and a receive), and as safe, since every request
    of the step is started before any wait.
    """

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

    def run(self, half, sync, deadline, mark):
        for peer, stamps, copies, _ in self.puts:
            stamp = stamps[half]
            if stamp[0]:                        # its message of two calls back not taken yet
                shm.await_stamp(stamp, True, deadline, self.where, peer)
            copies[half]()
            if sync is not None:
                sync()
            stamp[0] = mark
        requests = self.requests
        if requests:
            for request in requests:
                request.Start()
            for request, status, peer in zip(requests, self.statuses, self.peers):
                if not request.Test(status):
                    progress.wait_for(partial(request.Test, status), deadline,
                                      shm.gave_up(self.where, peer))
            for status, nbytes, view, peer in self.checks:
                if status.Get_count(_BYTE) != nbytes:
                    _check_size(status, view, peer, self.where)
        boxes = self.boxes
        if boxes:
            for peer, stamps, _ in boxes:
                seen = stamps[half][0]
                if seen != mark:
                    if not seen:
                        seen = shm.await_stamp(stamps[half], False, deadline, self.where, peer)
                    if seen != mark:
                        raise _mismatch(self.where, peer, seen, mark, self.call)
            if sync is not None:
                sync()
        for finish in self.finishes:
            finish[half]()
        if boxes:
            if sync is not None:
                sync()
            for _, stamps, _ in boxes:
                stamps[half][0] = 0

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
                _check_size(status, view, peer, self.where)
        half, mark = ctx.half, ctx.mark
        if self.boxes:
            for peer, stamps, _ in self.boxes:
                if stamps[half][0] != mark:
                    raise _mismatch(self.where, peer, stamps[half][0], mark, self.call)
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
    fingerprint (:func:`.notice.fingerprint`) and number (:func:`_mark`), and a receiver
    that finds another stamp raises MismatchError; all persistent requests use its tag (:func:`resident_tag`),
    which a message of another call never matches (the stall is diagnosed by
    :mod:`.notice`). A plan is resident by its size alone, the same on every
    rank, and messages between two ranks on pyar's private communicator match
    in the order they were sent, so one tag cannot confuse two calls. The
    requests are freed with the object.
    """

    def __init__(self, plan: Plan, comm: MPI.Comm, dtype: np.dtype, reduction: str | None,
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
        for where, sends, recvs in plan.spans:
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
                                   target.ctypes.data, target.nbytes, kind if fold else 0),
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
                rows.append((mailbox.PUT, *box.addresses[k], view.ctypes.data, view.nbytes, 0))
                waits.append((where, s.peer, box.stamps[k]))
            for row, wait in takes:
                rows.append(row)
                waits.append(wait)
            self.steps.append(_ResidentStep(where, requests, peers, received, finishes, puts,
                                             boxes, call))
        self.fingerprint = notice.fingerprint(call)
        # every message a mailbox: the whole call runs natively (kernels.mailbox)
        # start: the first row of a call that does not fill data from source (run's fill)
        self.program, self.source, self.start = None, None, 0
        if channels is not None and not any(step.requests for step in self.steps):
            if source is not None:      # a local row, no wait: data = source (run(fill=True))
                self.source, self.start = source, 1
                rows.insert(0, (mailbox.COPY, 0, 0, source.ctypes.data, source.ctypes.data,
                                self.data.ctypes.data, self.data.nbytes, 0))
                waits.insert(0, ("", None, None))
            self._load(rows, waits)
        _LIVE.add(self)

    def run(self, deadline=None, seq: int = 0, fill: bool = False) -> None:
        """One call, number ``seq`` on its communicator: every step on ``data`` (the caller
        fills it and reads the result), each on its lean path (see :class:`_ResidentStep`),
        every wait bounded by ``deadline`` (a ``time.monotonic()`` value) if given. ``fill``:
        the program fills ``data`` from its ``source`` (one it has) instead of the caller.
        (Flat: the hot path of small calls.)"""
        channels, steps = self.channels, self.steps
        call = 0 if channels is None else channels.calls
        if call is None or steps is None:
            self._gone()
        try:
            if channels is None:
                for step in steps:
                    step.run(0, None, deadline, 0)
            elif self.program is not None:      # (the program makes the mark: _mark)
                at = _native[0](self.address, self.rows, self.start - fill, call,
                                self.fingerprint, seq, self.spins)
                if at != self.rows:
                    self._resume(at, call, seq, deadline)
            else:
                half, sync = call & 1, channels.sync
                mark = self.fingerprint | (seq & 0x7FFFFFFF) << 32     # (_mark, inline)
                for step in steps:
                    step.run(half, sync, deadline, mark)
        except BaseException:
            self.interrupted()
            raise
        if channels is not None:
            channels.calls = call + 1

    def execution(self, seq: int = 0):
        """(steps, ctx, done) of call number ``seq`` as :class:`~.progress.Run` drives them:
        ``done()`` ends the call (the caller fills ``data`` before and reads it after)."""
        call = self._begin()
        ctx = _Call(call, self.channels, _mark(self.fingerprint, seq))
        return self.steps, ctx, lambda: self._end(call)

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


@atexit.register            # runs before mpi4py's MPI_Finalize, a C-level exit hook
def _free_residents():
    for resident in list(_LIVE):
        resident.free()
