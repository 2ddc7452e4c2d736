"""The simulator: every rank of a schedule in one process, on numpy buffers, no MPI.

It delivers each message with the step semantics of :mod:`pyar.core.schedule`, as
an MPI run would: a step completes once every peer it exchanges with has
posted the matching transfer (sends rendezvous, so a schedule that only works
with eager buffering is a deadlock here too). It measures traffic, and it
raises :class:`pyar.ScheduleError` naming rank, step and peer for an
unmatched or mis-sized message, for a deadlock, and for a read of scratch
that nothing was received into yet (its contents are undefined on MPI).

It reads the schedule as one :class:`pyar.core.schedule.Table` (numpy columns,
one row per transfer) and advances all ranks in waves with numpy calls, so
its cost grows with messages, not with Python work per element or message;
``data=False`` does the same without moving elements (traffic only).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from .. import collectives
from ..core import ops
from ..core.errors import ScheduleError
from ..core.schedule import Schedule, collector_paused
from ..kernels import reduce_into


@dataclass
class RankStats:
    """What one rank did: bytes and messages sent, bytes received, steps taken. Messages
    to itself (local copies and folds) are steps' work, not traffic: not counted.

    With a topology, ``bytes_sent_inter_node`` counts the bytes sent to ranks
    on other nodes (``bytes_sent_intra_node`` the rest); without one, 0.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    messages: int = 0
    steps: int = 0
    bytes_sent_inter_node: int = 0

    @property
    def bytes_sent_intra_node(self) -> int:
        return self.bytes_sent - self.bytes_sent_inter_node


@dataclass
class SimResult:
    outputs: list      # per-rank results, as the collective returns them (None where it does)
    stats: list        # per-rank RankStats
    traffic: object = None  # with a network: its links' loads (pyar.model.network.Traffic)
    verdict: object = None  # the contribution mode's (pyar.model.contributions.Verdict)


def simulate(schedule: Schedule, inputs=None, *, op="sum", data: bool = True,
             overwrite: bool = False, progress=None, reduce_dtype=None,
             network=None) -> SimResult:
    """Run ``schedule`` for all its ranks at once; ``inputs[r]`` is what rank r passes.

    ``inputs[r]`` is the ``x`` rank r would pass to the collective (see
    :mod:`pyar.collectives`): ``schedule.count`` elements, or ``count / size``
    for allgather; all of one dtype; not modified. A barrier takes none.
    ``inputs`` may also be one array of all ranks' (``inputs[r]`` rank r's);
    with ``overwrite``, a C-contiguous one may serve as the ranks' buffers (if
    the collective's data is x and the schedule uses no scratch), so that a
    simulation of a GiB of data needs no second GiB; it then holds the results.
    With ``data=False`` (traffic only) no element moves and ``inputs`` is the
    dtype or None (float32): the messages are matched, counted and checked
    for size and deadlock alike, and the outputs are None. ``progress``, if
    given, is called about once a second as ``progress(steps done, steps)``.
    A reduction runs in ``reduce_dtype`` as the runtime's does
    (:func:`pyar.core.ops.accumulator`: float16 and bfloat16 sums in float32 by
    default, the outputs rounded to the inputs' dtype once); the bytes counted
    are those of the type it runs in.
    With a ``network`` (:class:`pyar.model.network.Network`, at least as many ranks as the
    schedule, rank r on its endpoint r), every message is routed and the result's
    ``traffic`` says the bytes on each link, per step (the sender's step) and in all, and
    each message's hops (:class:`pyar.model.network.Traffic`).
    Data mode raises MemoryError, naming the bytes and the modes that fit, where its
    buffers (:func:`data_bytes`) exceed the memory free (:func:`available_memory`).
    """
    op = ops.resolve(op)
    record = collectives.collective(schedule.collective)
    size, count = schedule.size, schedule.count
    if not data:
        dtype = ops.check_dtype(np.dtype("float32" if inputs is None else inputs))
        wire = ops.accumulator(dtype, op if record.reduces else None, reduce_dtype)
        with collector_paused():
            table = schedule.table()
            stats = _stats(table, wire.itemsize, schedule.topology)
            _Run(table, count, None, None, None).run(progress)
            traffic = None if network is None else network.table_traffic(table, wire.itemsize)
        return SimResult([None] * size, stats, traffic)
    if record.count(1, size) == 0:          # a barrier: no input
        inputs = [np.zeros(0, np.uint8)] * size if inputs is None else inputs
    if inputs is None or len(inputs) != size:
        raise ValueError(f"need one input per rank: {size}, got "
                         f"{'none' if inputs is None else len(inputs)}")
    arrays = [np.asarray(x) for x in inputs]
    dtype = ops.check_dtype(arrays[0].dtype)
    if record.reduces:
        ops.check(op, dtype)
    expected = record.x_size(count, size)
    for r, a in enumerate(arrays):
        if a.dtype != dtype or record.count(a.size, size) != count:
            raise ValueError(f"input of rank {r} must have {expected} elements of {dtype} "
                             f"(a {record.name} of count {count}), got {a.size} of {a.dtype}")
        record.check(a.shape, size)
    wire = ops.accumulator(dtype, op if record.reduces else None, reduce_dtype)
    with collector_paused():
        table = schedule.table()
        need, free = data_bytes(schedule, wire.itemsize), available_memory()
        if need > free:
            raise MemoryError(
                f"data mode needs {_size(need)} for {schedule!r} ({size} ranks' data and "
                f"scratch in {wire}), and {_size(free)} of memory is free: simulate it in "
                f"the contribution mode (pyar.simulate_contributions; pyar sim --mode "
                f"contributions), or data=False for traffic only")
        scratch = np.zeros(size, np.int64)
        np.maximum.at(scratch, table.rank[table.scratch], table.hi[table.scratch])
        base = np.concatenate(([0], np.cumsum(scratch)))        # each rank's scratch offset
        as_is = type(record).load is collectives.Collective.load
        if (overwrite and as_is and not base[-1] and wire == dtype
                and isinstance(inputs, np.ndarray)
                and inputs.flags.c_contiguous and inputs.flags.writeable):
            memory = inputs.reshape(-1)
            data_part = memory.reshape(size, count)
        else:
            memory = np.empty(size * count + int(base[-1]), wire)
            data_part = memory[:size * count].reshape(size, count)
            for r, a in enumerate(arrays):
                data_part[r] = a.reshape(-1) if as_is else record.load(a, r, size)
        written = np.zeros(int(base[-1]), bool)                 # scratch received into
        stats = _stats(table, wire.itemsize, schedule.topology)
        offset = np.where(table.scratch, size * count + base[table.rank],
                          table.rank * count) + table.lo
        _Run(table, count, memory, written, offset,
             lambda mine, theirs: reduce_into(mine, theirs, op.reduction)).run(progress)
        traffic = None if network is None else network.table_traffic(table, wire.itemsize)
    outputs = []
    for r, a in enumerate(arrays):
        out = record.result(data_part[r], a.shape, r, size, schedule.root)
        if out is not None and record.reduces:
            ops.finalize(out, op, size)
            if out.dtype != dtype:
                with np.errstate(over="ignore"):   # (beyond the half type's range: inf)
                    out = out.astype(dtype)
        outputs.append(out)
    return SimResult(outputs, stats, traffic)


def data_bytes(schedule: Schedule, itemsize: int) -> int:
    """Bytes of the buffers data mode allocates for ``schedule`` with elements of
    ``itemsize`` bytes (every rank's data and scratch), besides the inputs and one wave's
    messages."""
    table = schedule.table()
    scratch = np.zeros(schedule.size, np.int64)
    np.maximum.at(scratch, table.rank[table.scratch], table.hi[table.scratch])
    return (schedule.size * schedule.count + int(scratch.sum())) * itemsize


ROW_BYTES = 150     # a transfer's share of a simulation: its table row and the run's columns


def table_rows(schedule: Schedule, samples: int = 4) -> int:
    """An estimate of the rows of ``schedule``'s table without making it: the median of
    the transfers of ``samples`` ranks spread over the communicator, times its size (the
    median, so that a root's fan-in does not count for every rank). Cost: those ranks'
    steps."""
    size = schedule.size
    ranks = sorted({size * k // samples for k in range(samples)} | {size - 1})
    counts = [sum(len(step.ops) for step in schedule.steps(r)) for r in ranks]
    return int(np.median(counts) * size)


def available_memory() -> int:
    """Bytes of memory this process may still take (Linux's MemAvailable, else free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _stats(table, itemsize, topology) -> list:
    """Per rank: bytes and messages sent to and received from other ranks, steps (all fixed
    by the table)."""
    size = len(table.nsteps)
    nbytes = (table.hi - table.lo) * itemsize
    send = table.send

    def per_rank(mask, weights=None):
        return np.bincount(table.rank[mask], weights=None if weights is None else
                           weights[mask], minlength=size).astype(np.int64).tolist()

    wire = table.rank != table.peer         # a message to itself is a local copy or fold
    sent, received = per_rank(send & wire, nbytes), per_rank(~send & wire, nbytes)
    messages = per_rank(send & wire)
    inter = [0] * size
    if topology is not None:
        node = np.asarray(topology.node_of)
        inter = per_rank(send & (node[table.rank] != node[table.peer]), nbytes)
    return [RankStats(*row) for row in zip(sent, received, messages, table.nsteps.tolist(),
                                           inter)]


def _ranges(starts, stops):
    """The indices of ``[starts[k], stops[k])`` for every k, concatenated, and each one's k."""
    lengths = stops - starts
    total = int(lengths.sum())
    owner = np.repeat(np.arange(len(starts)), lengths)
    first = np.cumsum(lengths) - lengths
    return np.arange(total) - np.repeat(first - starts, lengths), owner


def _rows(a, at, n):
    """``a`` seen as rows of ``n`` elements and the row of each offset in ``at``: rows that
    tile ``a`` when every offset is a multiple of ``n`` (numpy then copies them fastest),
    else every run of ``n`` elements (a view with overlapping rows)."""
    if not (at % n).any():
        whole = a.size // n * n
        return a[:whole].reshape(-1, n), at // n
    return np.ndarray((a.size - n + 1, n), a.dtype, a, strides=(a.itemsize, a.itemsize)), at


def _packed(a, at, n):
    """``a``'s rows of ``n`` elements at offsets ``at`` as one ``(len(at), n)`` view if they
    lie end to end in order (``at[k] = at[0] + k * n``), else None. Cost: one pass over ``at``."""
    if at.size > 1 and (np.diff(at) != n).any():
        return None
    return a[at[0]:at[0] + at.size * n].reshape(-1, n)


def _copy(src, src_at, dst, dst_at, lengths):
    """``dst[dst_at[k]:+lengths[k]] = src[src_at[k]:+lengths[k]]`` for every k (targets
    disjoint, ``src`` and ``dst`` distinct arrays), a numpy gather or scatter per distinct
    length: the cost is the elements moved, once where the rows of one side are packed end to
    end (twice else: numpy gathers into a temporary before it scatters)."""
    if lengths.size == 0:
        return
    first = lengths[0]
    groups = [first] if (lengths == first).all() else np.unique(lengths).tolist()
    for n in groups:
        if n == 0:
            continue
        pick = slice(None) if len(groups) == 1 else lengths == n
        to, fro = dst_at[pick], src_at[pick]
        block = _packed(src, fro, n)
        if block is not None:                       # a scatter of packed rows
            into, i = _rows(dst, to, n)
            into[i] = block
            continue
        rows, j = _rows(src, fro, n)
        block = _packed(dst, to, n)
        if block is not None and rows.flags.c_contiguous:  # a gather into packed rows
            np.take(rows, j, axis=0, out=block, mode="clip")    # "clip": no buffering
        elif block is not None:                     # (take would copy overlapping rows whole)
            block[...] = rows[j]
        else:
            into, i = _rows(dst, to, n)
            into[i] = rows[j]


def partners(table):
    """For every row of ``table``, its matching row at the other end (-1: none): the k-th send
    from a rank to another meets the k-th receive the other posts from it."""
    t, size = table, len(table.nsteps)
    partner = np.full(t.rank.size, -1, np.int64)
    sends, recvs = np.flatnonzero(t.send), np.flatnonzero(~t.send)
    ends = []
    for rows, src, dst in ((sends, t.rank, t.peer), (recvs, t.peer, t.rank)):
        channel = src[rows] * size + dst[rows]
        order = np.argsort(channel, kind="stable")       # rows are in step order
        channel = channel[order]
        first = np.zeros(channel.size, np.int64)         # where each row's channel begins
        if channel.size:
            new = np.flatnonzero(channel[1:] != channel[:-1]) + 1
            first[new] = new
            np.maximum.accumulate(first, out=first)
        ends.append((channel, np.arange(channel.size) - first, rows[order]))
    (cs, ns, rs), (cr, nr, rr) = ends
    if np.array_equal(cs, cr):                           # as many sends as receives each
        partner[rs], partner[rr] = rr, rs
    elif sends.size and recvs.size:
        scale = max(sends.size, recvs.size)              # > any nth
        ks, kr = cs * scale + ns, cr * scale + nr        # sorted: channel, then nth
        at = np.minimum(np.searchsorted(kr, ks), kr.size - 1)
        hit = kr[at] == ks
        partner[rs[hit]], partner[rr[at[hit]]] = rr[at[hit]], rs[hit]
    return partner


class _Run:
    """The simulation: ranks advance in waves, every rank whose current step can complete
    completing it in the same wave (the result does not depend on the order).

    A step completes once every peer it exchanges with has posted the matching transfer
    (the k-th send from a rank to another meets the k-th receive the other posts from it).
    Element data (with ``memory``, all ranks' buffers in one array, ``offset[row]`` where
    each row's chunk begins) moves by rows: a message is read from its sender's buffer
    when the first of its two ends completes (the sender's buffer is then still as its
    step began), kept aside if that was the sender, and lands when its receiver's step
    ends, the folds of a step in their listed order (``fold(mine, theirs)``, in place). The
    work per wave is numpy calls on the rows of the steps that may complete, so the cost
    grows with messages. Memory's unit is an element unless ``length`` gives each row's size
    in another (the contribution mode's atoms, :mod:`pyar.model.contributions`); ``count``
    is a rank's data in that unit, ``partner`` what :func:`partners` returns.
    """

    def __init__(self, table, count, memory, written, offset, fold=None, length=None,
                 partner=None):
        self.t, self.count = table, count
        self.memory, self.written, self.offset, self.fold = memory, written, offset, fold
        self.data_end = len(table.nsteps) * count       # memory: all data, then all scratch
        size = len(table.nsteps)
        self.size = size
        self.first = np.concatenate(([0], np.cumsum(table.nsteps)[:-1]))   # rank's step ids
        ids = self.first[table.rank] + table.step
        bounds_ = np.searchsorted(ids, np.arange(int(table.nsteps.sum()) + 1))
        self.start, self.stop = bounds_[:-1], bounds_[1:]
        self.partner = partners(table) if partner is None else partner
        # the partner row's step; unmatched rows wait for a step no rank reaches
        self.partner_step = np.where(self.partner >= 0, table.step[self.partner],
                                     np.iinfo(np.int64).max)
        elements = table.hi - table.lo
        self.length = elements if length is None else length   # in memory's units
        recv = np.flatnonzero(~table.send & (self.partner >= 0))
        self.mismatched = np.zeros(table.rank.size, bool)      # sender's size differs
        self.mismatched[recv] = elements[recv] != elements[self.partner[recv]]
        # the k-th fold of a step lands in round k (within a round, targets are disjoint)
        folds = np.flatnonzero(table.reduce)
        new = np.ones(folds.size, bool)
        new[1:] = ids[folds[1:]] != ids[folds[:-1]]
        run_start = np.flatnonzero(new)
        self.round = np.zeros(table.rank.size, np.int64)
        self.round[folds] = np.arange(folds.size) - np.repeat(
            run_start, np.diff(np.append(run_start, folds.size)))
        self.kept = {}          # send row -> (array, place) of a message read before it lands
        self.is_kept = np.zeros(table.rank.size, bool)
        self.delivered = np.zeros(table.rank.size, bool)

    def run(self, progress=None):
        t, size = self.t, self.size
        total, done_steps, shown = int(t.nsteps.sum()), 0, time.monotonic()
        current = np.zeros(size, np.int64)
        self.current = current
        check = np.flatnonzero(current < t.nsteps)
        unfinished = check.size
        while check.size:
            ids = self.first[check] + current[check]
            rows, owner = _ranges(self.start[ids], self.stop[ids])
            waiting = current[t.peer[rows]] < self.partner_step[rows]
            blocked = np.bincount(owner[waiting], minlength=check.size)
            done = check[blocked == 0]
            if not done.size:
                break
            ends = rows[blocked[owner] == 0]
            self._complete(ends)
            current[done] += 1
            done_steps += done.size
            if progress is not None and time.monotonic() - shown >= 1:
                progress(done_steps, total)
                shown = time.monotonic()
            # who may complete next: the ranks that moved, and the peers of their new steps
            # (so all that are left where every unfinished rank moved, as in a ring)
            moved = done[current[done] < t.nsteps[done]]
            if done.size < unfinished:
                ids = self.first[moved] + current[moved]
                rows, _ = _ranges(self.start[ids], self.stop[ids])
                mark = np.zeros(size, bool)
                mark[moved] = True
                mark[t.peer[rows]] = True
                check = np.flatnonzero(mark & (current < t.nsteps))
            else:
                check = moved
            unfinished -= done.size - moved.size
        stuck = np.flatnonzero(current < t.nsteps)
        if stuck.size:
            raise ScheduleError(self._stall(int(stuck[0])))

    def _complete(self, ends):
        """Complete the steps whose rows are ``ends`` (in (rank, step) order)."""
        t = self.t
        recvs = ends[~t.send[ends]]
        short = self.mismatched[recvs]
        if short.any():
            q = recvs[short][0]
            p = self.partner[q]
            raise ScheduleError(
                f"size mismatch: rank {t.rank[q]} step {t.step[q]} receives {t.hi[q] - t.lo[q]} "
                f"elements from peer {t.peer[q]}, which sends {t.hi[p] - t.lo[p]} at its step "
                f"{t.step[p]}")
        if self.memory is None:
            return
        sources = self.partner[recvs]
        fresh = ~self.is_kept[sources]
        self.delivered[sources] = True                      # they land now
        sends = ends[t.send[ends]]
        early = sends[~self.delivered[sends]]               # their receivers complete later
        if early.size:
            got, at = self._read(early)
            self.kept.update(zip(early.tolist(), zip([got] * early.size, at.tolist())))
            self.is_kept[early] = True
        lengths = self.length[recvs]
        place = np.cumsum(lengths) - lengths
        if fresh.all():
            payload, _ = self._read(sources)                # packed as ``place`` says
        else:
            payload = np.empty(int(lengths.sum()), self.memory.dtype)
            if fresh.any():
                _copy(*self._read(sources[fresh]), payload, place[fresh], lengths[fresh])
            for k in np.flatnonzero(~fresh).tolist():        # read when their senders completed
                got, at = self.kept.pop(int(sources[k]))
                payload[place[k]:place[k] + lengths[k]] = got[at:at + lengths[k]]
        self._land(recvs, payload, place, lengths)

    def _read(self, sends):
        """The messages of send rows ``sends`` from their senders' buffers, as
        ``(array, place of each)``; checks that scratch sent was received into."""
        t = self.t
        at, lengths = self.offset[sends], self.length[sends]
        scratch = t.scratch[sends]
        if scratch.any():
            full = np.empty(int(lengths[scratch].sum()), bool)
            place = np.cumsum(lengths[scratch]) - lengths[scratch]
            _copy(self.written, at[scratch] - self.data_end, full, place, lengths[scratch])
            if not full.all():
                bad = np.flatnonzero(~np.logical_and.reduceat(full, place))
                s = sends[scratch][bad[0]]
                raise ScheduleError(
                    f"rank {t.rank[s]} step {t.step[s]} sends scratch [{t.lo[s]}, {t.hi[s]}) "
                    f"to peer {t.peer[s]} before all of it was received into")
        place = np.cumsum(lengths) - lengths
        out = np.empty(int(lengths.sum()), self.memory.dtype)
        _copy(self.memory, at, out, place, lengths)
        return out, place

    def _land(self, recvs, payload, place, lengths):
        """Copy or fold ``payload`` into the receive rows ``recvs`` (in (rank, step) order)."""
        t, memory = self.t, self.memory
        at = self.offset[recvs]
        fold = t.reduce[recvs]
        scratch = t.scratch[recvs]
        check = fold & scratch
        if check.any():
            n = lengths[check]
            full = np.empty(int(n.sum()), bool)
            _copy(self.written, at[check] - self.data_end, full, np.cumsum(n) - n, n)
            if not full.all():
                bad = np.flatnonzero(~np.logical_and.reduceat(full, np.cumsum(n) - n))
                q = recvs[check][bad[0]]
                raise ScheduleError(
                    f"rank {t.rank[q]} step {t.step[q]} folds into scratch [{t.lo[q]}, "
                    f"{t.hi[q]}) from peer {t.peer[q]} before all of it was received into")
        copies = ~fold
        _copy(payload, place[copies], memory, at[copies], lengths[copies])
        if scratch.any():
            ones = np.ones(int(lengths[scratch].max()), bool)
            _copy(ones, np.zeros(int(scratch.sum()), np.int64), self.written,
                  at[scratch] - self.data_end, lengths[scratch])
        if not fold.any():
            return
        folds = np.flatnonzero(fold)
        nth = self.round[recvs[folds]]
        order = np.argsort(nth, kind="stable")              # grouped by round in one sort
        nth = nth[order]
        for pick in np.split(folds[order], np.searchsorted(nth, np.arange(1, nth[-1] + 1))):
            n = lengths[pick]
            mine = np.empty(int(n.sum()), memory.dtype)
            where = np.cumsum(n) - n
            _copy(memory, at[pick], mine, where, n)
            if pick.size == place.size:                 # every receive folds, once
                theirs = payload
            else:
                theirs = np.empty_like(mine)
                _copy(payload, place[pick], theirs, where, n)
            self.fold(mine, theirs)
            _copy(mine, where, memory, at[pick], n)

    def _stall(self, rank):
        """Why ``rank`` cannot complete its current step."""
        t, current = self.t, self.current
        i = int(current[rank])
        sid = self.first[rank] + i
        for row in range(self.start[sid], self.stop[sid]):
            peer = int(t.peer[row])
            if current[peer] < self.partner_step[row]:
                break
        j = int(current[peer])
        if j == t.nsteps[peer]:
            if t.send[row]:
                return (f"unmatched send: rank {rank} step {i} sends to peer {peer}, "
                        f"which has finished without receiving it")
            return (f"unmatched receive: rank {rank} step {i} receives from peer {peer}, "
                    f"which has finished without sending it")
        return (f"deadlock: rank {rank} is stuck at step {i} waiting for peer {peer}, "
                f"itself stuck at step {j}")
