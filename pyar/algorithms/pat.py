"""PAT, Parallel Aggregated Trees (Jeaugey, NCCL 2.23): reduce-scatter and allgather.

Bruck's logarithmic exchanges with the dimensions reversed: the farthest
peer first (distances ``P/2, P/4, ..., 1``, ``P`` the power of two at or
above ``N``), so the long-distance messages are the short ones. Each block
travels along a binomial tree rooted at its owner and shifted by it (tree of
block d: node ``x`` is rank ``(d + x) mod N``); offsets ``x >= N`` are the
virtual ranks of the power of two and are skipped, which is how any ``N``
works. The trees of all blocks run side by side, and a step aggregates the
blocks of every tree that crosses the same dimension into one step.

Parameter (a builder keyword argument): ``cap``, the aggregation buffer in
elements (default ``CAP``, 4 MiB of float32: NCCL's default buffer; None:
no cap). A step carries at most ``A = max(1, cap // ceil(count/N))``
blocks; a dimension with more is sent in ``ceil(n/A)`` consecutive steps.
No cap: ``ceil(log2 N)`` steps of growing (reduce-scatter) or shrinking
(allgather) messages. ``cap`` below one block: one block a step, ``N-1``
steps, as a ring's count but to logarithmic distances. The cap trades
latency (steps) for the buffer a step holds in flight; it never changes
which bytes go where, nor the fold order.

Reduce-scatter (tree: the parent of ``x`` is ``x - highbit(x)``). In the
step of distance D, rank r sends the partial sums of blocks ``r - x``,
``x in [D, min(2D, N))``, to rank ``r - D``, and folds those of blocks
``r - y``, ``y in [0, min(D, N - D))``, from rank ``r + D`` into its own:
a range of consecutive blocks, one message or two where it wraps past
block ``N-1``. The partial sums accumulate in ``data`` itself. Fold order:
block d ends on rank d as ``((v_0 + S_{P/2}) + S_{P/4}) + ... + S_1``, where
``v_0`` is rank d's own and ``S_D`` the sum of the subtree at offset D,
itself folded in the same shape; every block's tree is the same shifted
tree, so every block is folded in one order, whatever the cap (a step
splits a dimension, never reorders one block's folds).

Allgather (tree: the parent of ``x`` is ``x - lowbit(x)``, the transpose's
mirror). In the step of distance D, rank r sends blocks ``r - x``,
``x = 0, 2D, 4D, ... < N - D``, to rank ``r + D`` and receives the blocks
``r - D - x`` from rank ``r - D``. These are every ``2D``-th block: the
schedule IR has no local copy to pack them into one aggregation buffer, so
each block is its own message (a step posts up to ``A`` of them together).

Steps: ``sum over D of ceil(n_D / A)``, ``n_D = min(D, N - D)``
(reduce-scatter) or ``ceil((N - D) / 2D)`` (allgather), D the powers of
two below N; ``ceil(log2 N)`` with no cap, ``N-1`` (reduce-scatter) with
``A = 1``. Messages per rank: one or two a step (reduce-scatter);
``N-1``, one per block sent (allgather). Blocks sent per rank: ``N-1``
(reduce-scatter: every block but its own, once; allgather: block
``r - x`` once per child of offset x). Bytes sent per rank: reduce-scatter
``M - |block r|``; allgather ``sum_x children(x) |block r-x|``; both
``(N-1)/N * M`` when N divides the count. Cost: reduce-scatter
``steps * alpha + (N-1)/N*M*(beta + gamma)``, allgather
``(N-1) * alpha + (N-1)/N*M*beta`` (``exact=False``: a wrapped range adds a
message on some ranks, and the allgather's messages of one step share a
port, which the closed form counts but the timeline may overlap
differently). Limits: any ``N >= 1``; any count (blocks of
``numpy.array_split``, some empty when ``count < N``).

::

    reduce-scatter, N = 8, no cap: rank 0's sends    allgather, N = 8: block 0's tree
    D = 4:  blocks 7,6,5,4 (partial) -> rank 4      D = 4:  0 -> 4
    D = 2:  blocks 7,6 -> rank 6                     D = 2:  0 -> 2, 4 -> 6
    D = 1:  block 7 -> rank 7                        D = 1:  0->1 2->3 4->5 6->7
    block 0 at rank 0: ((v0 + S4) + S2) + S1, S4 = (v4 + S6) + S5 ...
"""

import functools

import numpy as np

from ..core.schedule import Chunk, Recv, Send, Table, bounds, compact
from . import register_algorithm
from ._terms import Terms, ceil_log2

CAP = 1 << 20       # elements in the aggregation buffer by default (4 MiB of float32)


def _per_step(count, size, cap):
    """Blocks a step may carry: ``max(1, cap // largest block)``; None: no cap."""
    if cap is None:
        return size
    if type(cap) is not int or cap < 0:
        raise ValueError(f"pat's cap must be None or an int >= 0 (elements), got {cap!r}")
    return max(1, cap // max(1, -(-count // size)))


def _distances(size):
    """The powers of two below ``size``, farthest first."""
    return [1 << j for j in reversed(range(ceil_log2(size)))]


def _blocks(edges, first, n, size):
    """Chunks of the ``n`` blocks from ``first`` on, mod ``size`` (two when they wrap)."""
    first %= size
    last = first + n
    if last <= size:
        return [Chunk("data", edges[first], edges[last])]
    return [Chunk("data", edges[first], edges[size]), Chunk("data", 0, edges[last - size])]


def _rs_steps(size, a):
    return sum(-(-min(d, size - d) // a) for d in _distances(size))


def _ag_steps(size, a):
    return sum(-(-(-(-(size - d) // (2 * d))) // a) for d in _distances(size))


def _rs_cost(n, count, m, topology, cap=CAP):
    steps = _rs_steps(n, _per_step(count, n, cap))
    return Terms(steps, (n - 1) / n * m, (n - 1) / n * m, steps)


def _ag_cost(n, count, m, topology, cap=CAP):
    return Terms(n - 1, (n - 1) / n * m, 0, _ag_steps(n, _per_step(count, n, cap)))


def _rs_groups(size, a):
    """Reduce-scatter's steps as ``(distance, lo, hi)``: offsets ``[d + lo, d + hi)``."""
    for d in _distances(size):                      # farthest first
        n = min(d, size - d)                        # offsets [d, d + n) are real ranks
        for lo in range(0, n, a):                   # at most a blocks a step
            yield d, lo, min(n, lo + a)


def _ag_groups(size, a):
    """Allgather's steps as ``(distance, offsets)``: the nodes with a child at that distance."""
    for d in _distances(size):                      # farthest first
        offsets = range(0, size - d, 2 * d)
        for lo in range(0, len(offsets), a):
            yield d, offsets[lo:lo + a]


@register_algorithm("pat", collective="reduce_scatter", exact=False, cost=_rs_cost)
def pat_reduce_scatter(rank, size, count, topology=None, *, cap=CAP):
    a = _per_step(count, size, cap)
    if size == 1 or count == 0:
        return []
    edges = bounds(count, size)
    steps = []
    for d, lo, hi in _rs_groups(size, a):
        to, source = (rank - d) % size, (rank + d) % size
        steps.append([*(Send(to, c) for c in _blocks(edges, rank - d - hi + 1, hi - lo, size)),
                      *(Recv(source, c, reduce=True)
                        for c in _blocks(edges, rank - hi + 1, hi - lo, size))])
    return compact(steps)


@register_algorithm("pat", collective="allgather", exact=False, cost=_ag_cost)
def pat_allgather(rank, size, count, topology=None, *, cap=CAP):
    a = _per_step(count, size, cap)
    if size == 1 or count == 0:
        return []
    edges = bounds(count, size)
    steps = []
    for d, offsets in _ag_groups(size, a):
        to, source = (rank + d) % size, (rank - d) % size
        steps.append([*(Send(to, *_blocks(edges, rank - x, 1, size)) for x in offsets),
                      *(Recv(source, *_blocks(edges, source - x, 1, size)) for x in offsets)])
    return compact(steps)


def _table(size, count, template, reduce):
    """Every rank's rows at once from one ``template`` of rows ``(step, send, distance to the
    peer, first block)`` relative to the rank (each row one block range of ``n`` blocks, the
    part of it before the end of the buffer and, where it wraps, the part after)."""
    edges = np.asarray(bounds(count, size), np.int64)
    step, send, dist, first, n = (np.asarray(c, np.int64)[None, :] for c in zip(*template))
    rank = np.arange(size)[:, None]
    first = (rank + first) % size
    last = first + n
    shape = (size, step.shape[1], 2)            # [before the end, after it]
    lo = np.stack([edges[first], np.zeros_like(first)], axis=2)
    hi = np.stack([edges[np.minimum(last, size)], edges[np.maximum(last - size, 0)]], axis=2)
    peer = np.broadcast_to(((rank + dist) % size)[:, :, None], shape)
    sends = np.broadcast_to(send[:, :, None].astype(bool), shape)
    columns = (np.broadcast_to(rank[:, :, None], shape), np.broadcast_to(step[:, :, None], shape),
               sends, peer, np.zeros(shape, bool), lo, hi, ~sends & reduce)
    return Table.compact(size, *(c.reshape(-1) for c in columns))


def _empty(size):
    return Table.compact(size, *([np.zeros(0, np.int64)] * 8))


def reduce_scatter_table(size, count, topology=None, *, cap=CAP):
    """What :func:`pat_reduce_scatter` returns, every rank at once, as one Table."""
    a = _per_step(count, size, cap)
    if size == 1 or count == 0:
        return _empty(size)
    template = [row for s, (d, lo, hi) in enumerate(_rs_groups(size, a))
                for row in ((s, 1, -d, -d - hi + 1, hi - lo), (s, 0, d, 1 - hi, hi - lo))]
    return _table(size, count, template, True)


def allgather_table(size, count, topology=None, *, cap=CAP):
    """What :func:`pat_allgather` returns, every rank at once, as one Table."""
    a = _per_step(count, size, cap)
    if size == 1 or count == 0:
        return _empty(size)
    template = [row for s, (d, offsets) in enumerate(_ag_groups(size, a))
                for row in [*((s, 1, d, -x, 1) for x in offsets),
                            *((s, 0, -d, -d - x, 1) for x in offsets)]]
    return _table(size, count, template, False)


pat_reduce_scatter.table = reduce_scatter_table
pat_allgather.table = allgather_table


def with_cap(builder, cap):
    """``builder`` (either of this module's) with its ``cap``, its Table form included."""
    made = functools.partial(builder, cap=cap)
    made.table = functools.partial(builder.table, cap=cap)
    return made
