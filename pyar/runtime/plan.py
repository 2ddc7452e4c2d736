"""The plan: one rank's schedule compiled once for the runtime, and the engine each call of it
runs on.

A rank's schedule is compiled once into a :class:`Plan` (cached on the
:class:`pyar.Comm`) and then run on each call with no schedule building. The
engine is chosen by the plan's buffer size and where its ranks are, alike on
every rank:

- up to :data:`RESIDENT_BYTES`, a :class:`~.programs.Resident`: the plan bound
  to buffers once, messages within a node through shared-memory mailboxes
  (one native program a call when every message is one), the others
  persistent requests;
- above it, with every message of every rank able to go through a mailbox
  (its ranks on one node), a :class:`~.programs.Stream`: each message
  streamed through a mailbox in pieces, folded straight out of shared memory;
- otherwise, and for calls in flight together, the general path
  (:mod:`.p2p`): each step's messages as ``Isend``/``Irecv`` on scratch and
  landing buffers allocated once per plan and dtype.

A large call apart from x runs the plan's :meth:`Plan.out_of_place` variant,
which reads the caller's x itself where the schedule reads data that nothing
has written yet, instead of copying x into data first (allreduce,
reduce_scatter, allgather and reduce: each record says where x and the
result lie in data, :meth:`~pyar.collectives.Collective.direct`). A variant
that uses no element of data outside the result runs in the result's buffer
alone (reduce_scatter on 2 ranks: no copy of x, and none of the result).
"""

from __future__ import annotations

import copy
import weakref
from functools import partial

import numpy as np
from mpi4py import MPI

from ..core.buffers import loader
from ..core.errors import Where
from ..core.schedule import Schedule
from ..kernels import folder
from ..model.cost import RESIDENT_BYTES
from . import shm
from .p2p import DATA, LANDING, SCRATCH, SOURCE, Context, CopyStep, P2PStep, Receive, Span, overlap
from .programs import Resident, Stream, mailbox_bytes

_BUFFER = {"data": DATA, "scratch": SCRATCH}
SPARES = 4                  # scratch and landing buffers a plan keeps for its next requests


class _Written:
    """The elements of data written so far (or holding nothing of x), as sorted disjoint
    ``[lo, hi)`` runs: a few per step, where a mask would take a byte per element."""

    def __init__(self, runs):
        self.runs = [(lo, hi) for lo, hi in runs if lo < hi]

    def unwritten(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The runs of ``[lo, hi)`` not written."""
        gaps, at = [], lo
        for a, b in self.runs:
            if b <= at or a >= hi:
                continue
            if a > at:
                gaps.append((at, a))
            at = max(at, b)
        if at < hi:
            gaps.append((at, hi))
        return gaps

    def any(self, lo: int, hi: int) -> bool:
        return self.unwritten(lo, hi) != [(lo, hi)] and lo < hi

    def all(self, lo: int, hi: int) -> bool:
        return not self.unwritten(lo, hi)

    def mark(self, lo: int, hi: int) -> None:
        """``[lo, hi)`` written."""
        runs = sorted(self.runs + [(lo, hi)] if lo < hi else self.runs)
        merged = []
        for a, b in runs:
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.runs = merged


class Plan:
    """One rank's schedule compiled for the runtime, with its reusable buffers."""

    def __init__(self, schedule: Schedule, rank: int):
        self.count, self.rank = schedule.count, rank
        self.scratch_count = schedule.scratch_count(rank)
        self.ops = [([Span(op.peer, _BUFFER[op.chunk.buffer], op.chunk.lo, op.chunk.hi)
                      for op in step.sends],
                     [(Span(op.peer, _BUFFER[op.chunk.buffer], op.chunk.lo, op.chunk.hi),
                       op.reduce) for op in step.recvs])
                    for step in schedule.steps(rank)]
        self.source = False
        self.window = slice(0, self.count)      # the part of data its data buffer is
        self.base = self            # (its out-of-place variants' base is this plan)
        self._compile(None)
        self._variants: dict = {}

    def _compile(self, written, shift: int = 0, kept: slice | None = None):
        """Compile ``ops`` into ``steps`` (and ``spans``: per step (where, sends, recvs)).

        ``written`` is None, or for an out-of-place variant the data elements
        written so far (:class:`_Written`) (or holding nothing of x: x is data's elements
        from ``shift`` on): a send of elements not yet written reads them from
        x, a fold into them receives in place and folds x's in (the kernels
        are commutative bit for bit), and x is copied into data only where a
        step needs both, or where the schedule never writes the result
        (``kept`` of data)."""
        self.landing_count, self.spans, self.steps = 0, [], []
        self._buffers, self._folds, self._residents, self._streams = {}, {}, {}, {}
        if written is None:
            self._channels = {}     # (a variant's mailboxes are its base's)
        self._spare: dict = {}      # dtype -> (scratch, landing) pairs of finished requests
        self._bound = weakref.WeakSet()
        for i, (sends, recvs) in enumerate(self.ops):
            where = Where(self.rank, i)
            before = []
            if written is not None:
                sends = [self._read_from(s, written, before, shift) for s in sends]
            compiled, landed = [], 0
            for span, reduce in recvs:
                if written is not None and span.buf == DATA:
                    direct = (reduce and not written.any(span.lo, span.hi)
                              and not any(overlap(span, s) for s in sends))
                    if reduce and not direct:
                        before += written.unwritten(span.lo, span.hi)
                    written.mark(span.lo, span.hi)      # a second fold there lands apart
                    if direct:
                        compiled.append(Receive(span, None, False, span._replace(
                            buf=SOURCE, lo=span.lo - shift, hi=span.hi - shift)))
                        continue
                if reduce or any(overlap(span, s) for s in sends):
                    n = span.hi - span.lo
                    compiled.append(Receive(Span(span.peer, LANDING, landed, landed + n), span,
                                          reduce))
                    landed += n
                else:
                    compiled.append(Receive(span, None, False))
            if before:
                self.steps.append(CopyStep(before, shift))
            self.landing_count = max(self.landing_count, landed)
            self.spans.append((where, sends, compiled))
            self.steps.append(P2PStep(where, sends, compiled))
        if written is not None and not written.all(kept.start, kept.stop):
            self.steps.append(CopyStep(written.unwritten(kept.start, kept.stop), shift))

    @staticmethod
    def _read_from(send: Span, written: _Written, before, shift: int) -> Span:
        """Where an out-of-place variant sends ``send`` from: x while none of it is written,
        else data (x's part copied in first, into ``before``)."""
        if send.buf != DATA:
            return send
        if not written.any(send.lo, send.hi):
            return send._replace(buf=SOURCE, lo=send.lo - shift, hi=send.hi - shift)
        before += written.unwritten(send.lo, send.hi)
        written.mark(send.lo, send.hi)
        return send

    def out_of_place(self, filled: slice, kept: slice) -> Plan:
        """This plan's variant that reads x where the caller's data buffer is not x: x is
        ``filled`` of data before the schedule, the result is ``kept`` of it after (built
        once for each: every rank sends and receives the same messages either way). Its
        ``window`` is the part of data it runs on: ``kept`` where it uses no element
        outside it (reduce_scatter on 2 ranks: its data buffer is then the result's), else
        all of data."""
        key = (filled.start, filled.stop, kept.start, kept.stop)
        variant = self._variants.get(key)
        if variant is None:
            variant = copy.copy(self)
            variant.source = True
            written = _Written([(0, filled.start), (filled.stop, self.count)])
            variant._compile(written, filled.start, kept)
            variant._variants = {}
            used = [(s.lo, s.hi) for _, sends, recvs in variant.spans
                    for s in [*sends, *(r.wire for r in recvs), *(r.dst for r in recvs)]
                    if s is not None and s.buf == DATA and s.lo < s.hi]
            used += [r for step in variant.steps if isinstance(step, CopyStep)
                     for r in step.ranges]
            if kept != variant.window and all(kept.start <= lo and hi <= kept.stop
                                              for lo, hi in used):
                variant._move(kept)
            self._variants[key] = variant
        return variant

    def _move(self, window: slice) -> None:
        """Run on ``window`` of data only: every data span moved down by its start."""
        by = window.start

        def moved(span):
            return span if span is None or span.buf != DATA else \
                span._replace(lo=span.lo - by, hi=span.hi - by)
        steps, spans = [], iter(self.spans)
        for step in self.steps:
            if isinstance(step, CopyStep):
                steps.append(CopyStep([(lo - by, hi - by) for lo, hi in step.ranges],
                                      step.shift - by))
                continue
            where, sends, recvs = next(spans)
            sends = [moved(s) for s in sends]
            recvs = [r._replace(wire=moved(r.wire), dst=moved(r.dst)) for r in recvs]
            steps.append(P2PStep(where, sends, recvs))
        self.steps = steps
        self.spans = [(step.where, step.sends, step.recvs) for step in steps
                      if not isinstance(step, CopyStep)]
        self.window = window

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
                self._channels[size] = pool.streams(self.spans, mailbox_bytes(pool),
                                                    _streamable(self.spans))
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

    def engine(self, comm: MPI.Comm, data: np.ndarray, reduction: str | None, call=None,
               source: np.ndarray | None = None, kind: str = "own") -> Engine:
        """How a request runs this plan (or its variant) on ``data`` (1-D, contiguous,
        ``count`` elements), folding with ``reduction`` (``"sum" "prod" "max" "min"``; None if
        nothing folds), for the calls ``call`` (a tuple: :func:`.notice.fingerprint`).
        ``source``: x, which the out-of-place variant reads (apart from data, as many
        bytes; kept untouched), or which a Resident's program copies into data itself.

        ``kind`` says how the request runs alongside others, alike on every rank:

        - ``"own"`` (a persistent request: others may be in flight with it): a Resident
          whose messages all go through mailboxes, or a Stream, with mailboxes of its own
          carved now (collective over the node), else the general path on buffers of its
          own;
        - ``"staged"``, ``"bound"`` (a blocking call: no other call of the plan runs
          meanwhile): the plan's own Resident, data copied in and out (staged) or one
          bound to data (bound), or the plan's Stream or buffers;
        - ``"once"`` (a nonblocking call): the general path on buffers no other call in
          flight uses (a spare of an earlier call's, or new: page faults).
        """
        dtype = data.dtype
        fold = self.fold(dtype, reduction)
        if kind == "once":
            spare = self._spare.setdefault(dtype, [])

            def launch(seq, tag):
                own = spare.pop() if spare else (np.empty(self.scratch_count, dtype),
                                                 np.empty(self.landing_count, dtype))

                def done():
                    if len(spare) < SPARES:
                        spare.append(own)
                return self.steps, Context((data, *own, source), comm, tag, fold), done, None
            return Engine(launch, fills=self.source)
        if self.small(dtype) and not self.source:
            if kind == "staged":
                resident = self.resident(comm, dtype, reduction, call)
                return Engine(_resident_launch(resident), _native(resident),
                              before=loader(resident.data, data),
                              after=loader(data, resident.data), resident=resident)
            if kind == "bound":
                resident = self.bind(comm, data, reduction, call, source)
                free = resident.free
            else:       # its own mailboxes; where some message has none, the general path
                pool = shm.pool_of(comm)    # (a Resident's MPI requests share one tag, which
                channels = None if pool is None else \
                    pool.channels(self.spans, dtype.itemsize)   # others in flight may have)
                resident = None if channels is None else Resident(
                    self, comm, dtype, reduction, data, channels, call, source)
                native = np.array([resident is not None and resident.program is not None],
                                  np.int64)     # on every rank (the pairs must agree), or none
                shm.bounded(comm.Iallreduce(MPI.IN_PLACE, native, MPI.MIN), native)
                free = _releasing(resident, pool, channels)
                if not native[0]:
                    free()
                    return self._general(comm, data, fold, source, kind)
                self._bound.add(resident)
            return Engine(_resident_launch(resident), _native(resident),
                          resident.source is not None, free=free, resident=resident)
        if kind == "own":
            stream, pool = None, shm.pool_of(comm)
            channels = None if pool is None else pool.streams(
                self.base.spans, mailbox_bytes(pool), _streamable(self.base.spans),
                shared=False)
            if channels is not None:
                stream = Stream(self, channels, dtype, reduction, call,
                                np.empty(self.scratch_count, dtype))
                stream.bind(data, source)
        else:
            stream = self.stream(comm, dtype, reduction, call)
        if stream is not None and kind == "own":
            return Engine(_program_launch(stream), stream, True,
                          free=_releasing(None, pool, channels))
        if stream is not None:
            return Engine(_program_launch(stream), stream, True,
                          before=partial(stream.bind, data, source))
        return self._general(comm, data, fold, source, kind)

    def _general(self, comm, data, fold, source, kind) -> Engine:
        """The general path's engine: the plan's steps on its scratch and landing buffers, or
        on buffers of the request's own (``kind`` ``"own"``); each start's own tag."""
        dtype = data.dtype
        own = (np.empty(self.scratch_count, dtype), np.empty(self.landing_count, dtype)) \
            if kind == "own" else self.buffers(dtype)
        bufs = (data, *own, source)
        return Engine(lambda seq, tag: (self.steps, Context(bufs, comm, tag, fold), None, None),
                      fills=self.source)


def _releasing(resident, pool, channels):
    """``free()`` of a persistent request's own engine: its Resident's MPI requests (if any)
    and its mailboxes' room in the shared segment (:meth:`.shm.Pool.release`)."""
    def free():
        if resident is not None:
            resident.free()
        if channels is not None:
            pool.release(channels)
    return free


class Engine:
    """How a request runs its plan on its buffers (:meth:`Plan.engine`).

    ``launch(seq, tag)`` gives the (steps, ctx, done, abandon) of call number ``seq``
    (tag ``tag``) for :class:`~.progress.Run` (done and abandon may be None);
    ``program``, if not None, is the native program (:class:`~.programs.Resident` or
    :class:`~.programs.Stream`) that a start with nothing else in flight runs as far as it
    can at once (:meth:`~.programs._Program.attempt`); ``fills`` whether the call reads x
    itself (a Resident's source row; the out-of-place variant's steps, a Stream's or not);
    ``before()`` and ``after()``, if not None, run before a call and after it completes
    (a staged Resident's copies in and out, a shared Stream's rows pointed at data);
    ``free()`` releases what it holds alone; ``resident`` is the Resident it runs, if
    any."""

    __slots__ = ("launch", "program", "fills", "before", "after", "free", "resident")

    def __init__(self, launch, program=None, fills=False, before=None, after=None,
                 free=None, resident=None):
        self.launch, self.program, self.fills = launch, program, fills
        self.before, self.after, self.free = before, after, free or _nothing
        self.resident = resident


def _nothing():
    return None


def _native(resident: Resident) -> Resident | None:
    """``resident`` if its calls run as one native program, else None."""
    return resident if resident.program is not None else None


def _resident_launch(resident: Resident):
    return lambda seq, tag: resident.execution(seq)


def _program_launch(program):
    return lambda seq, tag: program.execution(seq)


def _streamable(spans) -> bool:
    """Whether a :class:`Stream` may interleave the pieces of each step's messages: no
    receive lands where the step sends from, and the step's receives land on the same
    span or apart (so that every element is folded in the schedule's order)."""
    for _, sends, recvs in spans:
        targets = [r.wire if r.dst is None else r.dst for r in recvs]
        for i, t in enumerate(targets):
            if any(overlap(t, s) for s in sends) or any(
                    overlap(t, u) and t[1:] != u[1:] for u in targets[:i]):
                return False
    return True
