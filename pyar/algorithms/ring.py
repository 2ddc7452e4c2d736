"""Ring allreduce: a ring reduce-scatter followed by a ring allgather.

The buffer is cut into ``N`` blocks as numpy.array_split cuts it. In the
reduce-scatter each rank passes one block to its right neighbour per step
and folds in the block arriving from its left; after ``N-1`` steps rank r
holds block r fully reduced. The allgather passes the reduced blocks round
the ring for another ``N-1`` steps. The two halves are also the ``ring``
reduce-scatter and allgather, and the groundwork of ``segmented_ring`` and
``hierarchical``.

Steps: ``2(N-1)``. Bytes sent per rank: ``2(N-1)/N * M`` (bandwidth-optimal;
uneven blocks add at most one element per step). Cost:
``2(N-1)*alpha + 2(N-1)/N*M*beta + (N-1)/N*M*gamma``.
Limits: any ``N >= 1``; latency grows linearly in N.

::

    step s, reduce-scatter:  r sends block r-s-1 ──► r+1, folds block r-s-2 from r-1

        ┌──► 0 ──► 1 ──► 2 ──► 3 ──┐
        └──────────────────────────┘
"""

import functools

import numpy as np

from ..core.schedule import (Messages, Recv, Send, Table, Waves, bounds, compact, pieces,
                             segments, split)
from . import _terms, register_algorithm


def _blocks(n, lo, hi, segment):
    """Block b of ``[lo, hi)`` (of n) as a list of segments, the same number for every block."""
    blocks = split(hi - lo, n, lo)
    parts = 1 if segment is None else pieces(-(-(hi - lo) // n), segment)
    return [segments(a, b, parts) for a, b in blocks]


def reduce_scatter(i, group, lo, hi, segment=None):
    """Ring reduce-scatter over ``group`` (ranks) on ``[lo, hi)``: ``group[i]`` ends with block i.

    With ``segment``, blocks travel as segments of at most that many
    elements, one per step: a rank forwards segment k while receiving k+1.
    """
    n = len(group)
    blocks = _blocks(n, lo, hi, segment)
    right, left = group[(i + 1) % n], group[(i - 1) % n]
    for s in range(n - 1):
        for out, into in zip(blocks[(i - s - 1) % n], blocks[(i - s - 2) % n]):
            yield [Send(right, out), Recv(left, into, reduce=True)]


def allgather(i, group, lo, hi, segment=None):
    """Ring allgather over ``group`` on ``[lo, hi)``: ``group[i]`` starts with block i, ends with all."""
    n = len(group)
    blocks = _blocks(n, lo, hi, segment)
    right, left = group[(i + 1) % n], group[(i - 1) % n]
    for s in range(n - 1):
        for out, into in zip(blocks[(i - s) % n], blocks[(i - s - 1) % n]):
            yield [Send(right, out), Recv(left, into)]


def allreduce(i, group, lo, hi, segment=None):
    """Ring allreduce over ``group`` on ``[lo, hi)``: reduce-scatter, then allgather."""
    yield from reduce_scatter(i, group, lo, hi, segment)
    yield from allgather(i, group, lo, hi, segment)


def _segments(size, count, segment):
    """Block b's segment g as ``(lo[b, g], hi[b, g])``, as :func:`_blocks` cuts them."""
    edges = np.asarray(bounds(count, size), np.int64)
    parts = 1 if segment is None else pieces(-(-count // size), segment)
    length = np.diff(edges)
    q, r = (length // parts)[:, None], (length % parts)[:, None]
    g = np.arange(parts)[None, :]
    seg_lo = edges[:-1, None] + g * q + np.minimum(g, r)
    return seg_lo, seg_lo + q + (g < r)


def table_of(size, count, phases, segment=None):
    """The steps of every rank at once (what :func:`allreduce` and its halves yield, compacted):
    ``phases`` of ``(shift, fold)``, in step s of which rank i sends block ``i-s-shift``, each
    block as its segments (of at most ``segment`` elements) one per step, as
    :func:`reduce_scatter` cuts them."""
    seg_lo, seg_hi = _segments(size, count, segment)
    parts = seg_lo.shape[1]
    i = np.arange(size)[:, None]
    s = np.arange(size - 1)[None, :]
    out = np.concatenate([(i - s - shift) % size for shift, _ in phases], axis=1)
    n, blocks = out.shape
    steps = blocks * parts
    shape = (n, blocks, parts, 2)               # [Send(right, out), Recv(left, out - 1)]
    block = np.broadcast_to(np.stack([out, (out - 1) % size], axis=2)[:, :, None, :], shape)
    segment_of = np.broadcast_to(np.arange(parts)[None, None, :, None], shape)
    peer = np.empty(shape, np.int64)
    peer[..., 0], peer[..., 1] = (i[:, :, None] + 1) % size, (i[:, :, None] - 1) % size
    reduce = np.zeros(shape, bool)
    reduce[..., 1] = np.repeat([fold for _, fold in phases], size - 1)[None, :, None]
    columns = (np.broadcast_to(i[:, :, None, None], shape),
               np.broadcast_to(np.arange(steps).reshape(1, blocks, parts, 1), shape),
               np.broadcast_to([True, False], shape), peer, np.zeros(shape, bool),
               seg_lo[block, segment_of], seg_hi[block, segment_of], reduce)
    return Table.compact(size, *(c.reshape(-1) for c in columns))


def waves_of(size, count, phases, segment=None):
    """The messages of :func:`table_of`, a step at a time (a :class:`Waves`; None for one rank
    or no elements): chunk ``b * G + g`` is segment g of block b (G segments a block), and in
    each step every rank i sends a chunk to ``i+1``, which lands it on the same chunk.
    Cost: O(size) a step, ``len(phases) * (size-1) * G`` steps."""
    if size == 1 or count == 0:
        return None
    seg_lo, seg_hi = _segments(size, count, segment)
    parts = seg_lo.shape[1]
    i = np.arange(size)
    right = (i + 1) % size

    def steps():
        for shift, fold in phases:
            for s in range(size - 1):
                block = (i - s - shift) % size * parts
                for g in range(parts):
                    yield [Messages(i, right, block + g, block + g, fold)]
    return Waves(np.zeros(seg_lo.size, bool), seg_lo.reshape(-1), seg_hi.reshape(-1),
                 len(phases) * (size - 1) * parts, steps)


def _table(size, count, topology=None, *, phases):
    return table_of(size, count, phases)


def _waves(size, count, topology=None, *, phases):
    return waves_of(size, count, phases)


@register_algorithm("ring", auto=True,
                    cost=lambda n, count, m, topology: _terms.ring(n, m, 2, 1))
def ring(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    return compact(allreduce(rank, range(size), 0, count))


ring.table = functools.partial(_table, phases=((1, True), (0, False)))
ring.waves = functools.partial(_waves, phases=((1, True), (0, False)))


@register_algorithm("ring", collective="reduce_scatter", auto=True,
                    cost=lambda n, count, m, topology: _terms.ring(n, m, 1, 1))
def ring_reduce_scatter(rank, size, count, topology=None):
    """Rank r ends with block r reduced; ``(N-1)/N * M`` bytes sent per rank in ``N-1`` steps.

    Cost: ``(N-1)*alpha + (N-1)/N*M*(beta + gamma)``.
    """
    return compact(reduce_scatter(rank, range(size), 0, count))


ring_reduce_scatter.table = functools.partial(_table, phases=((1, True),))
ring_reduce_scatter.waves = functools.partial(_waves, phases=((1, True),))


@register_algorithm("ring", collective="allgather", auto=True,
                    cost=lambda n, count, m, topology: _terms.ring(n, m, 1, 0))
def ring_allgather(rank, size, count, topology=None):
    """Every rank ends with every block; ``(N-1)/N * M`` bytes sent per rank in ``N-1`` steps.

    Cost: ``(N-1)*alpha + (N-1)/N*M*beta`` (``M`` the gathered total).
    """
    return compact(allgather(rank, range(size), 0, count))


ring_allgather.table = functools.partial(_table, phases=((0, False),))
ring_allgather.waves = functools.partial(_waves, phases=((0, False),))
