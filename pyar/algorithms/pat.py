"""PAT, Parallel Aggregated Trees (Jeaugey, NCCL 2.23): allgather and reduce-scatter.

Bruck's logarithmic exchanges with the dimensions reversed. The allgather
sends to the farthest peer first (distances ``P/2, P/4, ..., 1``, ``P``
the power of two at or above ``N``); the reduce-scatter is its transpose,
nearest first. Either way the long-distance messages are the short ones:
one block at distance ``P/2``, the most blocks at distance 1. Each block
travels along a binomial tree rooted at its owner and shifted by it (tree
of block b: node ``x`` is rank ``(b + x) mod N``, the parent of x is ``x -
lowbit(x)``); offsets ``x >= N`` are the virtual ranks of the power of two
and are left out, which is how any ``N`` works. The trees of all blocks
run side by side: a step aggregates the blocks of every tree that crosses
the same dimension.

Parameter (a builder keyword argument): ``cap``, the aggregation buffer in
elements (default ``CAP``, 4 MiB of float32, NCCL's default buffer; None:
no cap). A step carries at most ``A = max(1, cap // ceil(count/N))`` blocks
(``count`` the buffer's elements, allgather's included); a dimension with
more is sent in ``ceil(n/A)`` consecutive steps. No cap: ``ceil(log2 N)``
steps. A cap under two blocks: one block a step, ``N-1`` steps, a ring's
count but to logarithmic distances. The cap trades steps (latency, a
``delta`` each) for the buffer a step holds in flight; it never changes
which bytes go where, nor the fold order.

Allgather. In the step of distance D, rank r sends blocks ``r - x``,
``x = 0, 2D, 4D, ... < N - D``, to rank ``r + D`` and receives the blocks
``r - D - x`` from rank ``r - D``, in place in ``data``. Reduce-scatter:
those steps last first, each reversed: rank r sends the partial sums of
blocks ``r - D - x`` to rank ``r - D`` and folds those of blocks ``r - x``
from rank ``r + D`` into its own, in ``data`` too. The blocks of a step are
every ``2D``-th one: the schedule IR has no local copy to pack them into
one buffer, so each block is its own message (a step posts up to ``A`` of
them at once). Fold order: block b ends on rank b as ``((v_0 + S_1) + S_2)
+ ... + S_{P/2}``, ``v_0`` rank b's own and ``S_D`` the sum of the subtree
at offset D, folded in the same shape (its children nearest first); every
block's tree is the same tree shifted, and a step splits a dimension but
never reorders one block's folds, so every block is folded in one order,
whatever the cap.

Steps: ``sum over D of ceil(n_D / A)``, ``n_D = ceil((N - D) / 2D)``, D
the powers of two below N: ``ceil(log2 N)`` with no cap, ``N-1`` with
``A = 1``. Messages per rank: ``N-1``, one per block sent. Bytes sent per
rank: reduce-scatter ``M - |block r|`` (every block but its own, once);
allgather ``sum over x of children(x) * |block r-x|`` (block ``r - x`` once
per child of offset x); both ``(N-1)/N * M`` when N divides the count.
Cost: ``(N-1) * alpha + (N-1)/N*M*beta`` (``+ (N-1)/N*M*gamma`` for the
reduce-scatter) ``+ steps * delta``, exact (:func:`pyar.model.cost.predict`
finds it for every cap). Against the ring it saves ``delta`` per step; so
``auto`` chooses the reduce-scatter from it (it wins where N is not a power
of two and a buffer holds MiBs, under the model); the allgather never beats
Bruck's (the same bytes in ``ceil(log2 N)`` messages) and is not a
candidate. Limits: any ``N >= 1``, any count (blocks of
``numpy.array_split``, some empty when ``count < N``).

::

    allgather, N = 8, no cap: block 0's tree      reduce-scatter: block 0's folds
    D = 4:  0 -> 4                                 D = 1:  1->0 3->2 5->4 7->6
    D = 2:  0 -> 2, 4 -> 6                         D = 2:  2->0 6->4
    D = 1:  0->1 2->3 4->5 6->7                    D = 4:  4->0
    rank 0 sends 1, 2 then 4 blocks                ((v0+v1) + (v2+v3)) + ((v4+v5) + (v6+v7))
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


def allgather_steps(size, a):
    """The allgather's steps as ``(distance, offsets)``, farthest first: the tree nodes
    ``x = 0, 2D, 4D, ...`` with a child ``x + D`` among the ranks, at most ``a`` a step."""
    for d in (1 << j for j in reversed(range(ceil_log2(size)))):
        offsets = range(0, size - d, 2 * d)
        for lo in range(0, len(offsets), a):
            yield d, offsets[lo:lo + a]


def reduce_scatter_steps(size, a):
    """The reduce-scatter's steps: the allgather's, last first (its transpose)."""
    return reversed(list(allgather_steps(size, a)))


def _block(edges, b, size):
    b %= size
    return Chunk("data", edges[b], edges[b + 1])


def _cost(n, count, m, topology, cap=CAP, reduce=False):
    """One message per block sent, ``N-1``, all of one size when N divides the count."""
    steps = sum(1 for _ in allgather_steps(n, _per_step(count, n, cap)))
    return Terms(n - 1, (n - 1) / n * m, (n - 1) / n * m if reduce else 0, steps)


def reduce_scatter_template(size, a):
    """The reduce-scatter's messages, nearest first, relative to the rank: rows ``(step,
    send, distance to the peer, distance back to the block)``; a receive folds."""
    return [row for s, (d, offsets) in enumerate(reduce_scatter_steps(size, a))
            for row in [*((s, 1, -d, d + x) for x in offsets),
                        *((s, 0, d, x) for x in offsets)]]


def allgather_template(size, a):
    """The allgather's messages, farthest first, as :func:`reduce_scatter_template`'s; a
    receive copies."""
    return [row for s, (d, offsets) in enumerate(allgather_steps(size, a))
            for row in [*((s, 1, d, x) for x in offsets),
                        *((s, 0, -d, d + x) for x in offsets)]]


def _rank_steps(rank, size, count, cap, template, reduce):
    """Rank ``rank``'s steps from its collective's ``template``."""
    a = _per_step(count, size, cap)
    if size == 1 or count == 0:
        return []
    edges = bounds(count, size)
    rows = template(size, a)
    steps = [[] for _ in range(rows[-1][0] + 1)]
    for s, send, dist, back in rows:
        peer, chunk = (rank + dist) % size, _block(edges, rank - back, size)
        steps[s].append(Send(peer, chunk) if send else Recv(peer, chunk, reduce=reduce))
    return compact(steps)


def _table(size, count, cap, template, reduce):
    """Every rank's rows at once, as one Table, from its collective's ``template``."""
    a = _per_step(count, size, cap)
    if size == 1 or count == 0:
        return Table.compact(size, *([np.zeros(0, np.int64)] * 8))
    edges = np.asarray(bounds(count, size), np.int64)
    step, send, dist, back = (np.asarray(c, np.int64)[None, :]
                              for c in zip(*template(size, a)))
    rank = np.arange(size)[:, None]
    block = (rank - back) % size
    shape = block.shape
    sends = np.broadcast_to(send.astype(bool), shape)
    columns = (np.broadcast_to(rank, shape), np.broadcast_to(step, shape), sends,
               (rank + dist) % size, np.zeros(shape, bool), edges[block], edges[block + 1],
               ~sends & reduce)
    return Table.compact(size, *(c.reshape(-1) for c in columns))


@register_algorithm("pat", collective="reduce_scatter", auto=True,
                    cost=functools.partial(_cost, reduce=True))
def pat_reduce_scatter(rank, size, count, topology=None, *, cap=CAP):
    return _rank_steps(rank, size, count, cap, reduce_scatter_template, True)


@register_algorithm("pat", collective="allgather", cost=_cost)
def pat_allgather(rank, size, count, topology=None, *, cap=CAP):
    return _rank_steps(rank, size, count, cap, allgather_template, False)


def reduce_scatter_table(size, count, topology=None, *, cap=CAP):
    """What :func:`pat_reduce_scatter` returns, every rank at once, as one Table."""
    return _table(size, count, cap, reduce_scatter_template, True)


def allgather_table(size, count, topology=None, *, cap=CAP):
    """What :func:`pat_allgather` returns, every rank at once, as one Table."""
    return _table(size, count, cap, allgather_template, False)


pat_reduce_scatter.table = reduce_scatter_table
pat_allgather.table = allgather_table
