"""The contribution mode: a schedule simulated for which ranks' contributions each chunk holds.

No element moves. Every rank's buffers are cut into *atoms*: the ranges between
consecutive chunk edges of the whole schedule (over all ranks; ``data`` and ``scratch``
apart), refined until every message carries whole atoms onto whole atoms, so that every
element of an atom has the same history. Each (rank, atom) holds one 64-bit word, a
sketch of the multiset of (rank, atom) origins folded into it: ``sum(u[r] * v[a])``
modulo 2**64 over them, for fixed random odd weights ``u`` (one per rank) and ``v``
(one per atom of origin). A copy moves words, a fold adds them (numpy's wrapping
uint64 add), in any order: what MSCCL's checker tracks as sets of ranks, in 8 bytes
instead of N bits. The run itself is the simulator's (:mod:`pyar.model.sim`): the same
matching, waves, deadlock, size and undefined-scratch checks, and the same traffic.

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

Cost: 8 bytes per (rank, atom) of data and scratch, and the simulator's per-message
work on the schedule's table; independent of the element count beyond the atoms it
makes (at most ``count`` per rank). Limits: the table of every transfer is in memory
(with the run's columns, about :data:`pyar.model.sim.ROW_BYTES` a transfer), and the run
takes a wave per step: a schedule of ``N^2`` transfers (ring, one-shot, two-shot) stops
being quick past a few thousand ranks (1.07e9 transfers at 16,384). A schedule whose chunk edges never settle
into whole atoms (one that shifts data by ever new offsets) ends with atoms of one
element.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import collectives
from ..core import ops
from ..core.schedule import Schedule, bounds, collector_paused
from .sim import SimResult, _ranges, _Run, _stats, partners

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
    in ``reduce_dtype`` as the runtime does), and whose ``verdict`` is a :class:`Verdict`.
    Raises :class:`pyar.ScheduleError` as the simulator does (deadlock, unmatched or
    mis-sized message, scratch read before it is received into), and ValueError for a
    collective whose postcondition this mode does not know (those of :data:`CHECKED`).
    ``op`` and ``dtype`` set only the bytes counted: contributions do not depend on them.
    """
    record = collectives.collective(schedule.collective)
    if record.name not in CHECKED:
        raise ValueError(f"the contribution mode checks the postconditions of "
                         f"{', '.join(CHECKED)}, not {record.name!r}: simulate it with data")
    op = ops.resolve(op)
    dtype = ops.check_dtype(np.dtype(dtype))
    wire = ops.accumulator(dtype, op if record.reduces else None, reduce_dtype)
    size, count = schedule.size, schedule.count
    with collector_paused():
        table = schedule.table()
        stats = _stats(table, wire.itemsize, schedule.topology)
        partner = partners(table)
        edges, scratch_edges = atoms(table, partner, count, record.name, size)

        def run(counting):
            state = _State(table, edges, scratch_edges, size)
            data = state.memory[:state.data_end].reshape(size, -1)
            initial(record.name, size, edges, data, counting)
            _Run(table, state.atoms, state.memory, state.written, state.offset, fold,
                 state.length, partner).run(progress)
            return data

        verdict = check(record.name, run(False), edges, schedule.root)
        if not verdict.ok:
            rank, atom = verdict.where
            held, due = int(run(True)[rank, atom]), size if record.reduces else 1
            verdict = Verdict(False, verdict.wrong, verdict.first + (
                f" hold {held} contributions where {due} belong" if held != due else
                f" hold {held} contributions, but not the ones that belong (one doubled and "
                f"another missing, or from other elements or ranks)"), verdict.where)
        traffic = None if network is None else network.table_traffic(table, wire.itemsize)
    return SimResult([None] * size, stats, traffic, verdict)


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
        self.offset = np.where(table.scratch, self.data_end + base[table.rank],
                               table.rank * self.atoms) + lo
        self.length = hi - lo
        self.memory = np.zeros(self.data_end + int(base[-1]), np.uint64)
        self.written = np.zeros(int(base[-1]), bool)


def fold(mine: np.ndarray, theirs: np.ndarray) -> None:
    """``mine = mine + theirs`` as sketches (or counts), in place, modulo 2**64."""
    np.add(mine, theirs, out=mine)


def weights(size: int, atoms: int):
    """The fixed random odd weights ``u`` (one per rank) and ``v`` (one per atom)."""
    rng = np.random.default_rng(SEED)
    u = rng.integers(0, 1 << 63, size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    return u, rng.integers(0, 1 << 63, atoms, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def atoms(table, partner, count: int, collective: str, size: int):
    """The atom edges of ``data`` and of ``scratch`` (sorted element offsets, data's from 0
    to ``count``): every chunk edge of the table, the blocks' edges of a blocked collective
    (alltoall's repeated in every block, so that a block's atoms match every other's), and
    what every message carries across from the other end, until nothing changes."""
    found = [np.concatenate(([0, count], table.lo[~table.scratch], table.hi[~table.scratch])),
             np.concatenate(([0], table.lo[table.scratch], table.hi[table.scratch]))]
    if collectives.collective(collective).blocked and count:
        found[0] = np.concatenate((found[0], bounds(count, size)))
    edges = [np.unique(e) for e in found]
    sends = np.flatnonzero(table.send & (partner >= 0))
    recvs = partner[sends]
    # the messages whose two ends differ in place (the others carry atoms onto themselves)
    moved = (((table.hi[sends] - table.lo[sends]) == (table.hi[recvs] - table.lo[recvs]))
             & ((table.lo[sends] != table.lo[recvs])
                | (table.scratch[sends] != table.scratch[recvs])))
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
                pick = table.scratch[fro] == bool(buffer)
                a, b = fro[pick], to[pick]
                cut = edges[buffer]
                lo, hi = table.lo[a], table.hi[a]
                inner = np.searchsorted(cut, lo, "right")
                at, k = _ranges(inner, np.maximum(np.searchsorted(cut, hi, "left"), inner))
                moved = table.lo[b][k] + cut[at] - lo[k]
                into = table.scratch[b][k]
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
