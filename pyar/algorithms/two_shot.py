"""Two-shot allreduce: a direct reduce-scatter, then a direct allgather, one step each.

The custom allreduce of vLLM and TensorRT-LLM for medium messages, as
point-to-point messages. The buffer is cut into ``N`` blocks as
numpy.array_split cuts it. Reduce-scatter: in one step rank r sends block
``r+k`` to rank ``r+k`` and folds rank ``r-k``'s block r into its own, for
every ``k = 1..N-1`` (the folds land in that order); afterwards rank r holds
block r reduced, and only rank r computed it, so every rank ends with the
same bits. Allgather: in one step rank r sends block r to every other rank
and receives every other rank's block. The k-th transfers of a step pair
rank r with ``r+k`` and ``r-k``, so no two messages of the same position
meet at one rank.

Steps: 2. Messages per rank: ``2(N-1)``. Bytes sent per rank:
``2(N-1)/N * M`` (bandwidth-optimal, as ring; uneven blocks add at most an
element per message). Cost (the closed form, ``exact=False``): each port
busy ``N-1`` message times a step,
``2(N-1)*alpha + 2(N-1)/N*M*beta + (N-1)/N*M*gamma + 2*delta``: ring's
alpha-beta-gamma time in 2 steps instead of ``2(N-1)``. It is a lower bound:
:func:`pyar.cost.predict` hands a rank's ports to its messages in the order
they were matched, not in the order of ``k``, and finds a longer path for
``N >= 3`` (6, 11, 16 messages of ``M/N`` for N = 3, 4, 5; 138 for 16).
Limits: any ``N >= 1``; ``N-1`` messages in flight per rank, and the MPI
executor lands the ``N-1`` folds of the first step apart (``(N-1)/N * M``
of temporary memory): for short and medium messages on a few ranks (a
node), where one step beats many.

For small messages the same libraries run one-shot (every rank receives
every other rank's whole buffer and folds all N itself, in rank order):
:mod:`pyar.algorithms.one_shot`.

::

    reduce-scatter (one step)       allgather (one step)
    0 ── block 1 ──► 1              0 ── block 0 ──► 1, 2, 3
    0 ── block 2 ──► 2              1 ── block 1 ──► 0, 2, 3
    0 ── block 3 ──► 3              ...
    0 ◄── block 0 ── 1, 2, 3 (folded)
"""

import numpy as np

from ..core.schedule import Chunk, Messages, Recv, Send, Table, Waves, bounds, compact, split
from . import _terms, register_algorithm


def _cost(n, count, m, topology):
    return _terms.Terms(2 * (n - 1), 2 * (n - 1) / n * m, (n - 1) / n * m, 2)


@register_algorithm("two_shot", cost=_cost, exact=False)
def two_shot(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    blocks = [Chunk("data", lo, hi) for lo, hi in split(count, size)]
    mine = blocks[rank]
    to = [(rank + k) % size for k in range(1, size)]
    fro = [(rank - k) % size for k in range(1, size)]
    reduce_scatter = [*(Send(p, blocks[p]) for p in to), *(Recv(p, mine, reduce=True) for p in fro)]
    allgather = [*(Send(p, mine) for p in to), *(Recv(p, blocks[p]) for p in fro)]
    return compact([reduce_scatter, allgather])


def _table(size, count, topology=None):
    """Every rank's steps at once (what :func:`two_shot` returns, as one Table)."""
    if size == 1 or count == 0:
        return Table.compact(size, *([np.zeros(0, np.int64)] * 8))
    edges = np.asarray(bounds(count, size), np.int64)
    r = np.arange(size)[:, None, None, None]            # rank, step, (sends, recvs), k
    step = np.arange(2)[None, :, None, None]
    side = np.arange(2)[None, None, :, None]
    k = np.arange(1, size)[None, None, None, :]
    to, fro = (r + k) % size, (r - k) % size
    shape = (size, 2, 2, size - 1)
    send = side == 0
    peer = np.where(send, to, fro)
    # reduce-scatter: send block `to`, fold into block r; allgather: send block r, copy `fro`'s
    block = np.where(step == 0, np.where(send, to, r), np.where(send, r, fro))
    columns = (r, step, send, peer, np.zeros(1, bool), edges[block], edges[block + 1],
               (step == 0) & ~send)
    return Table.compact(size, *(np.broadcast_to(c, shape).reshape(-1) for c in columns))


def _waves(size, count, topology=None):
    """The same messages a step at a time (a :class:`Waves`; None for one rank or no
    elements): chunk b is block b; a part per k, in which every rank r sends to ``r+k``.
    Cost: O(size) a part, ``2(N-1)`` parts."""
    if size == 1 or count == 0:
        return None
    edges = np.asarray(bounds(count, size), np.int64)
    r = np.arange(size)

    def steps():
        yield (Messages(r, (r + k) % size, (r + k) % size, (r + k) % size, True)
               for k in range(1, size))
        yield (Messages(r, (r + k) % size, r, r, False) for k in range(1, size))
    return Waves(np.zeros(size, bool), edges[:-1], edges[1:], 2, steps)


two_shot.table = _table
two_shot.waves = _waves
