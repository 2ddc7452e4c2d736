"""Schedules are data: the per-rank lists of steps an algorithm performs.

A schedule never touches MPI. An algorithm is a pure builder
``builder(rank, size, count, topology=None) -> list[Step]``; the runtime
(:mod:`pyar.runtime`) runs what it returns on real ranks, the simulator
(:mod:`pyar.model.sim`) on all of them in one process.

Step semantics: the transfers of a step are posted together and completed
together. Sends read the buffers as they were when the step began; every
receive takes effect when the step ends, ``reduce=True`` folding the incoming
data into its chunk (``dst = dst op incoming``, in the order the receives are
listed), ``reduce=False`` copying it. Messages between a pair of ranks match
in order, as MPI's do on one communicator and tag.

A rank may send to itself, as MPI allows: a Send and a Recv with ``peer`` the
rank itself, in one step, are a local copy (or fold) of what the chunk held when
the step began, taking effect in the receives' order like any other. This is
how a schedule folds in a fixed order that does not start from the rank's own
data, so that every rank computes the same bits (see ``one_shot``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
from typing import Callable, NamedTuple

import numpy as np

from .errors import ScheduleError

BUFFERS = ("data", "scratch")


class Chunk(NamedTuple):
    """The element range ``[lo, hi)`` of buffer ``"data"`` (the user's) or ``"scratch"``."""

    buffer: str
    lo: int
    hi: int

    @property
    def count(self) -> int:
        return self.hi - self.lo

    def overlaps(self, other: Chunk) -> bool:
        return (self.buffer == other.buffer and self.lo < other.hi
                and other.lo < self.hi and self.count > 0 and other.count > 0)


class Send(NamedTuple):
    """Send ``chunk`` to rank ``peer``."""

    peer: int
    chunk: Chunk


class Recv(NamedTuple):
    """Receive from rank ``peer`` into ``chunk``; fold it in with the op if ``reduce``."""

    peer: int
    chunk: Chunk
    reduce: bool = False


class Step:
    """Transfers posted together and completed together (see the module docstring)."""

    __slots__ = ("ops", "sends", "recvs")

    def __init__(self, ops):
        self.ops = tuple(ops)
        sends, recvs = [], []
        for op in self.ops:
            kind = type(op)
            if kind is Send:
                sends.append(op)
            elif kind is Recv:
                recvs.append(op)
            else:
                raise TypeError(f"a Step holds Send and Recv, not {op!r}")
        self.sends, self.recvs = tuple(sends), tuple(recvs)

    def __repr__(self):
        return f"Step({list(self.ops)!r})"

    def __eq__(self, other):
        return isinstance(other, Step) and self.ops == other.ops

    def __hash__(self):
        return hash(self.ops)


SEGMENT = 1 << 15      # elements per segment of the pipelined algorithms (128 KiB of float32)


@functools.lru_cache(maxsize=64)     # every rank of a 16,384-rank schedule asks for the same
def bounds(count: int, parts: int, lo: int = 0) -> tuple[int, ...]:
    """The ``parts + 1`` edges of ``[lo, lo + count)`` cut in blocks as numpy.array_split cuts it.

    The first ``count % parts`` blocks get one element more.
    """
    q, r = divmod(count, parts)
    return tuple(lo + i * q + min(i, r) for i in range(parts + 1))


def split(count: int, parts: int, lo: int = 0) -> list[tuple[int, int]]:
    """Block ranges ``(lo, hi)`` of ``[lo, lo + count)`` in ``parts`` blocks (see :func:`bounds`)."""
    edges = bounds(count, parts, lo)
    return list(zip(edges[:-1], edges[1:]))


def segments(lo: int, hi: int, parts: int) -> list[Chunk]:
    """``[lo, hi)`` of ``data`` as ``parts`` chunks of near-equal size (some empty if it is short)."""
    return [Chunk("data", a, b) for a, b in split(hi - lo, parts, lo)]


def pieces(count: int, segment: int) -> int:
    """How many segments of at most ``segment`` elements ``count`` elements need (at least 1)."""
    if not isinstance(segment, int) or segment < 1:
        raise ValueError(f"segment must be an int >= 1 (elements), got {segment!r}")
    return max(1, -(-count // segment))


def compact(op_lists) -> list[Step]:
    """Steps from lists of transfers, leaving out transfers of zero elements and empty steps.

    Both ends of a message see the same chunk size, so both drop it alike.
    """
    steps = []
    for ops in op_lists:
        ops = [op for op in ops if op.chunk.hi > op.chunk.lo]
        if ops:
            steps.append(Step(ops))
    return steps


Builder = Callable[..., "list[Step]"]


_TYPES = (np.int64, np.int64, bool, np.int64, bool, np.int64, np.int64, bool)


class Table(NamedTuple):
    """Every transfer of a schedule as numpy columns: one row per Send or Recv, in order of
    rank, then step, then place in the step. What the simulator and the cost model read.

    ``nsteps[r]`` is rank r's step count (empty steps included, which have no rows).
    """

    rank: np.ndarray        # int64, like every integer column
    step: np.ndarray
    send: np.ndarray        # bool: a Send, else a Recv
    peer: np.ndarray
    scratch: np.ndarray     # bool: the chunk is in "scratch", else in "data"
    lo: np.ndarray
    hi: np.ndarray
    reduce: np.ndarray      # bool: a receive that folds
    nsteps: np.ndarray

    @classmethod
    def compact(cls, size: int, rank, step, send, peer, scratch, lo, hi, reduce) -> Table:
        """The table of rows in (rank, step, place) order, as :func:`compact` leaves them:
        without transfers of zero elements and steps left empty, the rest renumbered."""
        columns = [np.asarray(c) for c in (rank, step, send, peer, scratch, lo, hi, reduce)]
        keep = columns[6] > columns[5]
        if not keep.all():
            columns = [c[keep] for c in columns]
        rank, step, send, peer, scratch, lo, hi, reduce = (
            np.ascontiguousarray(c, t) for c, t in zip(columns, _TYPES))
        new = np.ones(rank.size, bool)              # the first row of each (rank, step)
        new[1:] = (rank[1:] != rank[:-1]) | (step[1:] != step[:-1])
        ordinal = np.cumsum(new) - 1                # over all ranks; per rank from its first
        nsteps = np.bincount(rank[new], minlength=size)
        first = np.concatenate(([0], np.cumsum(nsteps)[:-1]))
        return cls(rank, ordinal - first[rank], send, peer, scratch, lo, hi, reduce, nsteps)

    @classmethod
    def of(cls, steps: list[list[Step]]) -> Table:
        """The table of per-rank step lists (``steps[r]`` rank r's)."""
        rows = [(r, i, type(op) is Send, op[0], op[1][0] == "scratch", op[1][1], op[1][2],
                 type(op) is Recv and op[2])
                for r, mine in enumerate(steps) for i, step in enumerate(mine) for op in step.ops]
        columns = np.array(rows, np.int64).reshape(-1, 8).T
        rank, step, send, peer, scratch, lo, hi, reduce = columns
        return cls(rank, step, send.astype(bool), peer, scratch.astype(bool), lo, hi,
                   reduce.astype(bool), np.array([len(s) for s in steps], np.int64))

    def renumbered(self, root: int) -> Table:
        """The table of a rooted schedule for ``root``, from the one for root 0."""
        size = len(self.nsteps)
        rank, peer = (self.rank + root) % size, (self.peer + root) % size
        order = np.argsort(rank, kind="stable")
        return Table(rank[order], self.step[order], self.send[order], peer[order],
                     self.scratch[order], self.lo[order], self.hi[order], self.reduce[order],
                     np.roll(self.nsteps, root))

    def steps_of(self, rank: int) -> list[Step]:
        """Rank ``rank``'s steps as Step objects (what the runtime and the simulator take)."""
        lo, hi = np.searchsorted(self.rank, [rank, rank + 1])
        steps = [[] for _ in range(int(self.nsteps[rank]))]
        for i, send, peer, scratch, a, b, reduce in zip(
                *(c[lo:hi].tolist() for c in (self.step, self.send, self.peer, self.scratch,
                                               self.lo, self.hi, self.reduce))):
            chunk = Chunk("scratch" if scratch else "data", a, b)
            steps[i].append(Send(peer, chunk) if send else Recv(peer, chunk, reduce))
        return [Step(ops) for ops in steps]


class Messages(NamedTuple):
    """Messages of every rank at once, as numpy columns: message k goes from rank ``src[k]``'s
    chunk ``out[k]`` to rank ``dst[k]``'s chunk ``into[k]`` (ids of :class:`Waves` chunks),
    folded in where ``fold``, else copied (one value for all of them)."""

    src: np.ndarray
    dst: np.ndarray
    out: np.ndarray
    into: np.ndarray
    fold: bool


class Waves(NamedTuple):
    """A schedule in lockstep, as its messages: what the contribution mode streams
    (:mod:`pyar.model.contributions`) where the table of every transfer is too large.

    ``scratch``, ``lo``, ``hi`` are the columns of the chunks the messages name (chunk c is
    ``[lo[c], hi[c])`` of ``scratch`` if ``scratch[c]``, else of ``data``). ``steps()``
    yields the schedule's ``length`` steps, each an iterable of parts (:class:`Messages`):
    a step is a step of every rank with a message in it (both ends of every message are in
    the same step), sends reading the buffers as the step began; a part may not read what
    an earlier part of its step lands on. Messages of chunks of zero elements are left out,
    as :func:`compact` leaves them out.
    """

    scratch: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    length: int
    steps: Callable


@contextlib.contextmanager
def collector_paused():
    """Pause Python's cyclic GC while it lasts: its full passes over millions of fresh step
    tuples (none of them cyclic) would otherwise take most of a large table's making (3x
    at 8,192 ranks) and double the time of a large simulation."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Schedule:
    """The steps of every rank of one collective instance.

    Built lazily, one rank at a time, and memoised: the runtime asks for
    one rank only, the simulator for all of them (as a :class:`Table`, which a
    builder with a ``table(size, count, topology) -> Table`` attribute makes for
    all ranks at once, vectorized; it must equal the per-rank lists, or be None where
    it has no such form for those arguments; a ``waves(size, count, topology) -> Waves``
    attribute gives the same messages step by step, or None). Builders of rooted
    collectives (reduce, bcast) write the schedule for root 0; for another
    root every rank is renumbered relative to it (``(rank - root) % size``),
    as MPI libraries do.
    """

    def __init__(self, algorithm: str, collective: str, size: int, count: int,
                 builder: Builder, topology=None, root: int = 0):
        self.algorithm = algorithm
        self.collective = collective
        self.size = size
        self.count = count
        self.topology = topology
        self.root = root
        self._builder = builder
        self._steps: dict[int, list[Step]] = {}
        self._table: Table | None = None

    def __repr__(self):
        root = f", root={self.root}" if self.root else ""
        return (f"Schedule({self.algorithm!r}, collective={self.collective!r}, "
                f"size={self.size}, count={self.count}{root})")

    def steps(self, rank: int) -> list[Step]:
        """The steps of ``rank``, checked for local consistency (see :func:`check_steps`)."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank must be in [0, {self.size}), got {rank}")
        steps = self._steps.get(rank)
        if steps is None:
            root, size = self.root, self.size
            relative = (rank - root) % size
            steps = list(self._builder(relative, size, self.count, self.topology))
            check_steps(steps, relative, size, self.count)
            if root:
                steps = [Step(type(op)((op.peer + root) % size, *op[1:]) for op in step.ops)
                         for step in steps]
            self._steps[rank] = steps
        return steps

    def table(self) -> Table:
        """Every rank's transfers as one :class:`Table` (memoised)."""
        if self._table is None:
            bulk = getattr(self._builder, "table", None)
            table = None if bulk is None else bulk(self.size, self.count, self.topology)
            if table is None:
                with collector_paused():
                    table = Table.of([self.steps(r) for r in range(self.size)])
                self._steps.clear()      # the table holds them, in a tenth of the memory
            elif self.root:
                table = table.renumbered(self.root)
            self._table = table
        return self._table

    def waves(self) -> Waves | None:
        """The schedule as :class:`Waves`, where its builder streams them (root 0), else None."""
        bulk = getattr(self._builder, "waves", None)
        if bulk is None or self.root:
            return None
        return bulk(self.size, self.count, self.topology)

    def scratch_count(self, rank: int) -> int:
        """Elements of scratch the rank's steps use."""
        return max((op.chunk.hi for step in self.steps(rank) for op in step.ops
                    if op.chunk.buffer == "scratch"), default=0)


def check_steps(steps: list[Step], rank: int, size: int, count: int) -> None:
    """Raise ScheduleError unless every transfer of ``rank`` is well formed on its own.

    Peers must be ranks of the communicator, chunks must lie in their
    buffer (``data`` has ``count`` elements), a rank's messages to itself must pair
    up within their step (in order, sizes equal), and within a step a copying
    receive may not overlap any other receive (which would land last is
    undefined).
    """
    for i, step in enumerate(steps):
        if type(step) is not Step:
            raise ScheduleError(f"rank {rank} step {i}: expected a Step, got {step!r}")
        for op in step.ops:
            peer, (buffer, lo, hi) = op[0], op[1]
            if type(peer) is not int or not 0 <= peer < size:
                raise ScheduleError(f"rank {rank} step {i}: {type(op).__name__} peer {peer!r} "
                                    f"is not a rank in [0, {size})")
            if buffer == "data":
                inside = 0 <= lo <= hi <= count
            elif buffer == "scratch":
                inside = 0 <= lo <= hi
            else:
                raise ScheduleError(f"rank {rank} step {i}: {type(op).__name__} chunk buffer "
                                    f"{buffer!r} is not one of {BUFFERS}")
            if not inside:
                raise ScheduleError(f"rank {rank} step {i}: {type(op).__name__} with peer {peer} "
                                    f"has chunk {tuple(op[1])} outside buffer {buffer!r} "
                                    f"(data holds {count} elements)")
        recvs = step.recvs
        own = [[op.chunk.count for op in ops if op.peer == rank] for ops in (step.sends, recvs)]
        if own[0] != own[1]:
            raise ScheduleError(f"rank {rank} step {i}: its messages to itself do not pair up "
                                f"in the step (sends of {own[0]} elements, receives of "
                                f"{own[1]}): a local copy is a Send and a Recv of one size")
        if len(recvs) > 1 and _overlap(recvs):
            for a, ra in enumerate(recvs):      # only now the pairs, to name them
                for rb in recvs[a + 1:]:
                    if ra.chunk.overlaps(rb.chunk) and not (ra.reduce and rb.reduce):
                        raise ScheduleError(
                            f"rank {rank} step {i}: receives from peers {ra.peer} and "
                            f"{rb.peer} overlap in {ra.chunk.buffer} and one of them copies")


def _overlap(recvs) -> bool:
    """Whether two of ``recvs`` overlap and one of them copies: a sweep over them sorted by
    buffer and start, O(k log k) (a step receiving from 1,023 peers has half a million pairs)."""
    ends = {}                   # buffer -> (furthest end so far, furthest end of a copy)
    for r in sorted((r for r in recvs if r.chunk.hi > r.chunk.lo), key=lambda r: r.chunk[:2]):
        buffer, lo, hi = r.chunk
        reach, copies = ends.get(buffer, (lo, lo))
        if lo < (copies if r.reduce else reach):
            return True
        ends[buffer] = (max(reach, hi), copies if r.reduce else max(copies, hi))
    return False


@functools.lru_cache(maxsize=32)     # a simulated 1,024-rank ring is millions of steps
def _cached(collective, algorithm, size, count, topology, builder, root):
    return Schedule(algorithm, collective, size, count, builder, topology, root)


def build(collective: str, algorithm: str, size: int, count: int, builder: Builder,
          topology=None, root: int = 0) -> Schedule:
    """The (memoised) schedule of ``algorithm`` for ``size`` ranks and ``count`` elements."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be an int >= 1, got {size!r}")
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be an int >= 0, got {count!r}")
    if not isinstance(root, int) or not 0 <= root < size:
        raise ValueError(f"root must be a rank in [0, {size}), got {root!r}")
    if topology is not None and topology.size != size:
        raise ValueError(f"topology describes {topology.size} ranks, not {size}")
    return _cached(collective, algorithm, size, count, topology, builder, root)
