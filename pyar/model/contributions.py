"""The contribution mode: a schedule simulated for which ranks' contributions each chunk holds.

No element moves. Every rank's buffers are cut into *atoms*: the ranges between
consecutive chunk edges of the whole schedule (over all ranks; ``data`` and ``scratch``
apart), refined until every message carries whole atoms onto whole atoms, so that every
element of an atom has the same history. Each (rank, atom) holds one 64-bit word, a
sketch of the multiset of (rank, atom) origins folded into it: ``sum(u[r] * v[a])``
modulo 2**64 over them, for fixed random odd weights ``u`` (one per rank) and ``v``
(one per atom of origin). A copy moves words, a fold adds them (numpy's wrapping
uint64 add), in any order: what MSCCL's checker tracks as sets of ranks, in 8 bytes
instead of N bits.

The run takes one of two paths. A schedule whose builder gives its messages a step at a
time (:class:`pyar.core.schedule.Waves`: ring, segmented ring, one-shot, two-shot) is
streamed: each step's messages, as numpy arrays, are checked (sizes, whole atoms, scratch
received into before it is read), copied or folded and counted, and no table is made;
its atoms are those its chunks' edges make. Any other is run on its table by the
simulator (:mod:`pyar.model.sim`): the same matching, waves, deadlock, size and
undefined-scratch checks, and the same traffic.

The postcondition is then checked atom by atom (:func:`check`): for allreduce every
rank's every atom must hold every rank's contribution from the same atom exactly once
(the word ``sum(u) * v[a]``); for reduce_scatter the rank's block, for reduce the
root, for bcast the root's atom once, for allgather block j rank j's own, for alltoall
block j rank j's block ``rank`` at the same offset. A wrong multiset of origins passes
only if its words sum to the right one. An odd number of contributions too many or too
few never does (the word then differs by an odd amount); other wrong sets (one doubled
and another missing, data from other elements or from another rank) for a fraction of
the choices of weights of the order of 2**-60. Where the check fails, a second run
counts each atom's contributions, to say how many it holds. Idempotent ops (max, min)
are held to "exactly once" too, which their data may not show.

Cost: 8 bytes per (rank, atom) of data and scratch, independent of the element count
beyond the atoms it makes (at most ``count`` per rank); streamed, a few dozen numpy
calls per part of a step on its messages (ring and one-shot at 16,384 ranks, 1.07e9
transfers each, in under a minute), else the simulator's per-message work on the table,
which must fit in memory (with the run's columns, about :data:`pyar.model.sim.ROW_BYTES`
a transfer: a ``log N`` schedule at 16,384 ranks, one of ``N^2`` transfers only to a
few thousand). Memory is checked before the words are made: MemoryError naming the
bytes. A schedule whose chunk edges never settle into whole atoms (one that shifts data
by ever new offsets) ends with atoms of one element.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from .. import collectives
from ..core import ops
from ..core.errors import ScheduleError
from ..core.schedule import Schedule, bounds, collector_paused
from .sim import (RankStats, SimResult, _ranges, _Run, _size, _stats, available_memory,
                  partners)

SEED = 0x5EED                   # the weights' seed: the same verdicts on every run
CHECKED = ("allreduce", "reduce_scatter", "allgather", "reduce", "bcast", "alltoall",
           "barrier")


@dataclass
class Verdict:
    """The postcondition's check: ``ok`` if it holds; ``wrong`` counts the elements (over
    all ranks) that break it, ``first`` says where the first of them is and what it holds."""

    ok: bool
    wrong: int = 0
    first: str = ""
    where: tuple | None = None      # the first wrong (rank, atom)

    def __str__(self):
        return "yes" if self.ok else f"NO ({self.wrong} wrong: {self.first})"


def simulate_contributions(schedule: Schedule, dtype="float32", *, op="sum",
                           reduce_dtype=None, progress=None, network=None) -> SimResult:
    """Simulate ``schedule`` in the contribution mode (see the module docstring).

    Returns a :class:`pyar.model.sim.SimResult` whose ``outputs`` are None, whose ``stats``
    and ``traffic`` are those :func:`pyar.simulate` gives for elements of ``dtype`` (run
    in ``reduce_dtype`` as the runtime does; streamed, ``traffic``'s per-message columns
    are in the order of the steps), and whose ``verdict`` is a :class:`Verdict`.
    Raises :class:`pyar.ScheduleError` as the simulator does (deadlock, unmatched or
    mis-sized message, scratch read before it is received into), ValueError for a
    collective whose postcondition this mode does not know (those of :data:`CHECKED`), and
    MemoryError, naming the bytes, where its words do not fit in the memory free.
    ``op`` and ``dtype`` set only the bytes counted: contributions do not depend on them.
    """
    record = collectives.collective(schedule.collective)
    if record.name not in CHECKED:
        raise ValueError(f"the contribution mode checks the postconditions of "
                         f"{', '.join(CHECKED)}, not {record.name!r}: simulate it with data")
    op = ops.resolve(op)
    dtype = ops.check_dtype(np.dtype(dtype))
    wire = ops.accumulator(dtype, op if record.reduces else None, reduce_dtype)
    size = schedule.size
    with collector_paused():
        waves = schedule.waves()
        run = (_Tabled(schedule, record.name) if waves is None else
               _Streamed(waves, schedule.count, record.name, size, schedule.topology,
                         network is not None))
        verdict = check(record.name, run(False, progress), run.edges, schedule.root)
        if not verdict.ok:
            rank, atom = verdict.where
            held, due = int(run(True, progress)[rank, atom]), size if record.reduces else 1
            verdict = Verdict(False, verdict.wrong, verdict.first + (
                f" hold {held} contributions where {due} belong" if held != due else
                f" hold {held} contributions, but not the ones that belong (one doubled and "
                f"another missing, or from other elements or ranks)"), verdict.where)
        traffic = None if network is None else run.traffic(network, wire.itemsize)
    return SimResult([None] * size, run.stats(wire.itemsize, schedule.topology), traffic,
                     verdict)


def _fits(words: int) -> None:
    """MemoryError, naming the bytes, unless ``words`` 8-byte words fit in the memory free."""
    free = available_memory()
    if 8 * words > free:
        raise MemoryError(f"the contribution mode needs {_size(8 * words)} for its words "
                          f"({words} (rank, atom) pairs) and {_size(free)} is free")


class _Tabled:
    """The contribution mode on the schedule's table (:class:`pyar.model.sim._Run`): any
    schedule. Cost: the table of every transfer and the run's columns in memory."""

    def __init__(self, schedule, collective):
        self.table = table = schedule.table()
        self.size = schedule.size
        self.partner = partners(table)
        sends = np.flatnonzero(table.send & (self.partner >= 0))
        self.edges, self.scratch_edges = atoms((table.scratch, table.lo, table.hi),
                                               sends, self.partner[sends], schedule.count,
                                               collective, self.size)
        self.collective = collective

    def __call__(self, counting, progress):
        """Every rank's data atoms after the schedule (words, or with ``counting`` counts)."""
        state = _State(self.table, self.edges, self.scratch_edges, self.size)
        data = state.memory[:state.data_end].reshape(self.size, -1)
        initial(self.collective, self.size, self.edges, data, counting)
        _Run(self.table, state.atoms, state.memory, state.written, state.offset, fold,
             state.length, self.partner).run(progress)
        return data

    def stats(self, itemsize, topology):
        return _stats(self.table, itemsize, topology)

    def traffic(self, network, itemsize):
        return network.table_traffic(self.table, itemsize)


class _State:
    """Every rank's atoms in one array of words (all ranks' data, then all scratch), with
    each row's offset and length in atoms and the scratch atoms received into."""

    def __init__(self, table, edges, scratch_edges, size):
        self.atoms = len(edges) - 1
        self.data_end = size * self.atoms
        lo, hi = np.empty_like(table.lo), np.empty_like(table.hi)
        for pick, cut in ((~table.scratch, edges), (table.scratch, scratch_edges)):
            lo[pick] = np.searchsorted(cut, table.lo[pick])
            hi[pick] = np.searchsorted(cut, table.hi[pick])
        mine = np.zeros(size, np.int64)                 # scratch atoms per rank
        np.maximum.at(mine, table.rank[table.scratch], hi[table.scratch])
        base = np.concatenate(([0], np.cumsum(mine)))
        _fits(self.data_end + int(base[-1]))
        self.offset = np.where(table.scratch, self.data_end + base[table.rank],
                               table.rank * self.atoms) + lo
        self.length = hi - lo
        self.memory = np.zeros(self.data_end + int(base[-1]), np.uint64)
        self.written = np.zeros(int(base[-1]), bool)


class _Streamed:
    """The contribution mode on a schedule's :class:`pyar.core.schedule.Waves`, a step at a
    time: no table. Each part of a step is checked (sizes, whole atoms onto whole atoms,
    scratch received into before it is sent or folded into, no read of what an earlier part
    of the step landed on), read, landed and counted with numpy calls on its messages.
    Cost: O(atoms moved) a part, plus a few dozen numpy calls; memory: the words (8 bytes
    per (rank, atom), every rank's scratch as large as the largest), a byte per scratch word,
    4 bytes per word where a step has several parts, and with a network 32 bytes a message
    (its ends, elements and step).
    Limits: the atoms are those the chunks' edges make (:func:`atoms` with no messages), so
    a message between chunks that they cut differently is a ScheduleError."""

    def __init__(self, waves, count, collective, size, topology, routed):
        self.waves, self.collective, self.size = waves, collective, size
        none = np.zeros(0, np.int64)
        self.edges, scratch_edges = atoms((waves.scratch, waves.lo, waves.hi), none, none,
                                          count, collective, size)
        first, last = (np.where(waves.scratch, np.searchsorted(scratch_edges, e),
                                np.searchsorted(self.edges, e)) for e in (waves.lo, waves.hi))
        self.elements, self.atoms = waves.hi - waves.lo, last - first
        self.per = (len(self.edges) - 1, int(last[waves.scratch].max(initial=0)))
        self.data_end = size * self.per[0]
        self.start = np.where(waves.scratch, self.data_end, 0) + first    # a chunk's atom 0
        self.stride = np.where(waves.scratch, self.per[1], self.per[0])   # ... for each rank
        self.single = bool((self.atoms <= 1).all())
        self.shape = None if self.single else _shapes(waves, first, last, self.edges,
                                                     scratch_edges)
        self.tally = _Tally(size, topology, routed)

    def __call__(self, counting, progress):
        """Every rank's data atoms after the schedule (words, or with ``counting`` counts);
        the first call counts the traffic."""
        size, words = self.size, self.data_end + self.size * self.per[1]
        _fits(words)
        memory = np.zeros(words, np.uint64)
        data = memory[:self.data_end].reshape(size, -1)
        initial(self.collective, size, self.edges, data, counting)
        written = np.zeros(words - self.data_end, bool)
        landed = None                       # per word, the last step of several parts on it
        tally = None if self.tally.done else self.tally
        nsteps = np.zeros(size, np.int64)   # each rank's steps so far
        active = np.zeros(size, bool)
        shown = time.monotonic()
        for wave, step in enumerate(self.waves.steps()):
            parts = iter(step)
            head = [p for p in (next(parts, None), next(parts, None)) if p is not None]
            several = len(head) > 1
            if several and landed is None:
                landed = np.zeros(words, np.uint32)
            for m in itertools.chain(head, parts):
                m, n = self._part(m, memory, written, landed if several else None, wave + 1,
                                  nsteps)
                active[m.src] = active[m.dst] = True
                if tally is not None:
                    tally.add(m, n, nsteps)
            nsteps += active
            active[:] = False
            if progress is not None and time.monotonic() - shown >= 1:
                progress(wave + 1, self.waves.length)
                shown = time.monotonic()
        if tally is not None:
            tally.finish(nsteps)
        return data

    def _part(self, m, memory, written, landed, stamp, nsteps):
        """Check, read and land the messages ``m`` of a step (stamping the words it lands on
        in ``landed`` where given); returns those of any elements, and their elements."""
        n = self.elements[m.out]
        if not n.all():
            keep = np.flatnonzero(n)
            same = m.into is m.out
            m = m._replace(src=m.src[keep], dst=m.dst[keep], out=m.out[keep])
            m = m._replace(into=m.out if same else m.into[keep])
            n = n[keep]
        stride, start = self.stride[m.out], self.start[m.out]
        fro = m.src * stride + start
        if m.into is m.out:                 # (each message lands where it was read)
            to = m.dst * stride + start
        else:
            wrong = self.elements[m.into] != n
            if not self.single and not wrong.any():
                wrong = self.shape[m.into] != self.shape[m.out]
            if wrong.any():
                self._fail(m, int(np.flatnonzero(wrong)[0]), nsteps, "receives")
            to = m.dst * self.stride[m.into] + self.start[m.into]
        owner = None                        # each atom's message, where they are not one each
        if not self.single:
            fro, owner = _ranges(fro, fro + self.atoms[m.out])
            to, _ = _ranges(to, to + self.atoms[m.into])

        def first(bad):
            k = int(np.flatnonzero(bad)[0])
            return k if owner is None else int(owner[k])
        if landed is not None and (landed[fro] == stamp).any():
            self._fail(m, first(landed[fro] == stamp), nsteps, "landed")
        for at, why in ((fro, "sends"), (to if m.fold else None, "folds into")):
            if at is not None and self.per[1]:
                inside = at >= self.data_end
                if inside.any() and not written[at[inside] - self.data_end].all():
                    missing = np.zeros(at.size, bool)
                    missing[inside] = ~written[at[inside] - self.data_end]
                    self._fail(m, first(missing), nsteps, why)
        payload = memory[fro]
        if m.fold:
            np.add.at(memory, to, payload)
        else:
            memory[to] = payload
            if self.per[1]:
                written[to[to >= self.data_end] - self.data_end] = True
        if landed is not None:
            landed[to] = stamp
        return m, n

    def _fail(self, m, k, nsteps, why):
        """Raise the ScheduleError of message k of ``m``, which ``why`` breaks the rules."""
        w, src, dst, out, into = self.waves, int(m.src[k]), int(m.dst[k]), m.out[k], m.into[k]

        def name(c):
            return f"{'scratch' if w.scratch[c] else 'data'} [{w.lo[c]}, {w.hi[c]})"
        if why == "receives":
            raise ScheduleError(
                f"size mismatch: rank {dst} step {nsteps[dst]} receives {name(into)} from "
                f"peer {src}, which sends {name(out)} at its step {nsteps[src]}"
                + (" cut into other atoms" if self.elements[into] == self.elements[out] else ""))
        if why == "folds into":
            raise ScheduleError(f"rank {dst} step {nsteps[dst]} folds into {name(into)} from "
                                f"peer {src} before all of it was received into")
        if why == "sends":
            raise ScheduleError(f"rank {src} step {nsteps[src]} sends {name(out)} to peer {dst} "
                                f"before all of it was received into")
        raise ScheduleError(f"rank {src} step {nsteps[src]} sends {name(out)} to peer {dst} "
                            f"after an earlier part of its step landed on it (a step of Waves "
                            f"may not read what it lands on in an earlier part)")

    def stats(self, itemsize, topology):
        return self.tally.stats(itemsize)

    def traffic(self, network, itemsize):
        return self.tally.traffic(network, itemsize)


class _Tally:
    """The traffic of streamed messages as they pass: per rank elements sent and received,
    messages, elements sent to other nodes, steps; with ``routed`` every message's ends,
    elements and sender's step, for :meth:`pyar.model.network.Network.traffic`."""

    def __init__(self, size, topology, routed):
        self.size, self.done = size, False
        self.node = None if topology is None else np.asarray(topology.node_of)
        self.sent, self.received, self.messages, self.inter = (np.zeros(size, np.int64)
                                                               for _ in range(4))
        self.routes = [] if routed else None

    def add(self, m, elements, nsteps):
        """Count messages ``m`` of ``elements`` each, their senders at steps ``nsteps``."""
        src, dst = m.src, m.dst
        if self.routes is not None:         # (a message to itself too: it crosses no link)
            self.routes.append((src, dst, elements, nsteps[src]))
        wire = src != dst                   # a message to itself is a local copy or fold
        if not wire.all():
            src, dst, elements = src[wire], dst[wire], elements[wire]
        if not src.size:
            return
        size = self.size
        self.sent += np.bincount(src, elements, size).astype(np.int64)
        self.received += np.bincount(dst, elements, size).astype(np.int64)
        self.messages += np.bincount(src, minlength=size)
        if self.node is not None:
            apart = self.node[src] != self.node[dst]
            self.inter += np.bincount(src[apart], elements[apart], size).astype(np.int64)

    def finish(self, nsteps):
        """The run is over, its ranks took ``nsteps`` steps."""
        self.nsteps, self.done = nsteps, True

    def stats(self, itemsize):
        """Per rank :class:`pyar.model.sim.RankStats`, elements of ``itemsize`` bytes."""
        return [RankStats(*row) for row in zip(
            (self.sent * itemsize).tolist(), (self.received * itemsize).tolist(),
            self.messages.tolist(), self.nsteps.tolist(), (self.inter * itemsize).tolist())]

    def traffic(self, network, itemsize):
        """The messages' loads on ``network`` (:meth:`pyar.model.network.Network.traffic`)."""
        if self.size > network.size:
            raise ValueError(f"a schedule of {self.size} ranks does not fit this network of "
                             f"{network.size} ({network.describe()})")
        columns = zip(*self.routes) if self.routes else [[np.zeros(0, np.int64)]] * 4
        src, dst, elements, step = (np.concatenate(c) for c in columns)
        return network.traffic(src, dst, elements * itemsize, step)


def _shapes(waves, first, last, edges, scratch_edges):
    """Per chunk, a word that tells chunks cut into other atoms apart (but for a chance of
    about 2**-64): the sum of a hash (splitmix64) of each of its atoms' place and length."""
    words = np.zeros(len(first), np.uint64)
    for pick, cut in ((~waves.scratch, edges), (waves.scratch, scratch_edges)):
        chunks = np.flatnonzero(pick)
        at, k = _ranges(first[chunks], last[chunks])
        x = (((cut[at] - waves.lo[chunks][k]) << 32) ^ (cut[at + 1] - cut[at])).astype(np.uint64)
        with np.errstate(over="ignore"):
            x += np.uint64(0x9E3779B97F4A7C15)
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            np.add.at(words, chunks[k], x ^ (x >> np.uint64(31)))
    return words


def fold(mine: np.ndarray, theirs: np.ndarray) -> None:
    """``mine = mine + theirs`` as sketches (or counts), in place, modulo 2**64."""
    np.add(mine, theirs, out=mine)


def weights(size: int, atoms: int):
    """The fixed random odd weights ``u`` (one per rank) and ``v`` (one per atom)."""
    rng = np.random.default_rng(SEED)
    u = rng.integers(0, 1 << 63, size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    return u, rng.integers(0, 1 << 63, atoms, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def atoms(chunks, sends, recvs, count: int, collective: str, size: int):
    """The atom edges of ``data`` and of ``scratch`` (sorted element offsets, data's from 0
    to ``count``): every edge of ``chunks`` (columns ``scratch, lo, hi``), the blocks' edges
    of a blocked collective (alltoall's repeated in every block, so that a block's atoms
    match every other's), and what every message (from chunk ``sends[k]`` to chunk
    ``recvs[k]``) carries across from the other end, until nothing changes."""
    scratch, lo, hi = chunks
    found = [np.concatenate(([0, count], lo[~scratch], hi[~scratch])),
             np.concatenate(([0], lo[scratch], hi[scratch]))]
    if collectives.collective(collective).blocked and count:
        found[0] = np.concatenate((found[0], bounds(count, size)))
    edges = [np.unique(e) for e in found]
    # the messages whose two ends differ in place (the others carry atoms onto themselves)
    moved = (((hi[sends] - lo[sends]) == (hi[recvs] - lo[recvs]))
             & ((lo[sends] != lo[recvs]) | (scratch[sends] != scratch[recvs])))
    sends, recvs = sends[moved], recvs[moved]
    pairs = [(sends, recvs), (recvs, sends)]
    while True:
        if collective == "alltoall" and count:
            block = count // size
            edges[0] = np.union1d(((edges[0] % block)[None, :] + np.arange(size)[:, None]
                                   * block).reshape(-1), [count])
        more = [[], []]
        for fro, to in pairs:                       # one end's inner edges onto the other
            for buffer in (0, 1):
                pick = scratch[fro] == bool(buffer)
                a, b = fro[pick], to[pick]
                cut = edges[buffer]
                start, stop = lo[a], hi[a]
                inner = np.searchsorted(cut, start, "right")
                at, k = _ranges(inner, np.maximum(np.searchsorted(cut, stop, "left"), inner))
                moved = lo[b][k] + cut[at] - start[k]
                into = scratch[b][k]
                more[0].append(moved[~into])
                more[1].append(moved[into])
        grown = [np.union1d(e, np.concatenate(m)) if m else e for e, m in zip(edges, more)]
        if all(g.size == e.size for g, e in zip(grown, edges)):
            return edges
        edges = grown


def _owner(edges, size, count):
    """The block (of ``size``) each atom of ``edges`` lies in."""
    return np.searchsorted(np.asarray(bounds(count, size)), edges[:-1], "right") - 1


def initial(collective: str, size: int, edges, out=None, counting: bool = False) -> np.ndarray:
    """Every rank's data atoms before the schedule, into ``out`` (size x atoms words) if
    given: its own contribution where x lies (allgather: block ``rank`` only; the other
    blocks a word no contribution has); with ``counting``, the count of them (1, or 0)."""
    u, v = weights(size, len(edges) - 1)
    words = np.empty((size, len(edges) - 1), np.uint64) if out is None else out
    if counting:
        words[:] = 1
    else:
        np.multiply(u[:, None], v[None, :], out=words)
    if collective == "allgather" and len(edges) > 1:
        elsewhere = _owner(edges, size, edges[-1])[None, :] != np.arange(size)[:, None]
        nothing = np.broadcast_to(np.uint64(0) if counting else v * np.uint64(SEED | 1),
                                  words.shape)
        words[elsewhere] = nothing[elsewhere]
    return words


def check(collective: str, data: np.ndarray, edges, root: int) -> Verdict:
    """The postcondition on ``data`` (every rank's data atoms after the schedule, as
    :func:`initial` made them); a failed Verdict's ``where`` is the first wrong
    (rank, atom), its ``first`` names the rank and elements."""
    size, n = data.shape
    if collective == "barrier" or n == 0:
        return Verdict(True)
    count = int(edges[-1])
    u, v = weights(size, n)
    everything = (u.sum() * v)[None, :]
    ranks = slice(None)                     # the ranks whose result there is
    care = np.True_
    if collective in ("allreduce", "reduce"):
        want = everything
        ranks = slice(root, root + 1) if collective == "reduce" else ranks
    elif collective == "bcast":
        want = (u[root] * v)[None, :]
    elif collective == "reduce_scatter":
        want = everything
        care = _owner(edges, size, count)[None, :] == np.arange(size)[:, None]
    elif collective == "allgather":
        want = (u[_owner(edges, size, count)] * v)[None, :]
    else:                                   # alltoall: block j holds rank j's block r
        block, owner = count // size, _owner(edges, size, count)
        want = np.empty_like(data)
        for r in range(size):
            origin = np.searchsorted(edges, r * block + edges[:-1] - owner * block)
            want[r] = u[owner] * v[np.minimum(origin, n - 1)]
    bad = (data[ranks] != (want[ranks] if want.shape[0] > 1 else want)) & care
    if not bad.any():
        return Verdict(True)
    r, a = (int(i[0]) for i in np.nonzero(bad))
    r += ranks.start or 0
    return Verdict(False, int(bad.sum(axis=0) @ np.diff(edges)),
                   f"rank {r} elements [{edges[a]}, {edges[a + 1]})", (r, a))
