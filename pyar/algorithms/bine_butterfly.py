"""Bine butterflies: reduce-scatter, allgather and allreduce on Swing's peers, rank-ordered.

The allgather is recursive doubling with the peer of step s at ``r + rho(s)``
(r even) or ``r - rho(s)`` (r odd), ``rho = 1, -1, 3, -5, 11, ...``, nearest
first (De Sensi et al., "Bine Trees", SC 2025; ``_bine``): after step s a rank
holds the blocks of a circular range of ``2^(s+1)`` ranks around it, and
sends all of it to its next peer, one message, or two where the range wraps
past rank ``P-1``. The reduce-scatter is its transpose, steps backwards: in
step s rank r sends its peer the partial sums of the peer's range and folds
the peer's of its own, so block r ends on rank r, reduced there once. The
allreduce is the one and then the other. Other rank counts use MPICH's fold
(``_pof2``): ranks ``2i`` and ``2i+1`` (``i < N - P``) pair up, their blocks
merge, and the odd one takes part.

Unlike ``swing_bandwidth`` (the same butterfly on a permuted block layout,
halving distances as the messages halve), the blocks here stay in rank
order, as reduce_scatter and allgather must leave them, so the largest
messages (half the buffer) go to the farthest peer, ``rho(L-1)`` away.

Steps: ``log2 P`` each (allreduce ``2 log2 P``), +2 on folded ranks.
Bytes sent per rank: ``(P-1)/P * M`` each (allreduce twice), as recursive
halving and doubling. Messages: up to 2 a step (a wrapped range). Cost:
recursive halving's (reduce-scatter), doubling's (allgather) or
Rabenseifner's (allreduce), ``log2 N * alpha + (N-1)/N*M*beta (+
(N-1)/N*M*gamma)`` per half for a power of two, plus an alpha for each
wrapped range on the critical path: ``log2 N - 2`` per half, as
:func:`pyar.cost.predict` finds for N <= 128 (the closed form is
``exact=False``: for 11 - 15 ranks the model's path differs by a message
and up to two blocks). Limits: any ``N >= 1``.

::

    allgather, N = 8: ranges held after each step (rank 0 / rank 3)
    step 0 (rho(0) = 1):   0◄►1  2◄►3 ...    {0,1}        / {2,3}
    step 1 (rho(1) = -1):  0◄►7  2◄►1 ...    {6,7,0,1}    / {2,3,4,5}
    step 2 (rho(2) = 3):   0◄►3  2◄►5 ...    all          / all
"""

from ..core.schedule import Chunk, Recv, Send, bounds
from . import _terms, register_algorithm
from ._bine import ranges, starts
from ._pof2 import around, fold, pair_block
from ._swing import peer


def _chunks(first, width, pof2, edges):
    return [Chunk("data", edges[a], edges[b]) for a, b in ranges(first, width, pof2)]


def allgather_butterfly(v, pof2, edges, real):
    """Participant v starts with block v (of ``edges``) and ends with all of them."""
    start = starts(pof2)
    for s in range(pof2.bit_length() - 1):
        other = peer(v, s, pof2)
        width = 1 << s
        yield [*(Send(real(other), c) for c in _chunks(int(start[s][v]), width, pof2, edges)),
               *(Recv(real(other), c) for c in _chunks(int(start[s][other]), width, pof2,
                                                         edges))]


def reduce_scatter_butterfly(v, pof2, edges, real):
    """Participant v ends with block v (of ``edges``) reduced."""
    start = starts(pof2)
    for s in reversed(range(pof2.bit_length() - 1)):
        other = peer(v, s, pof2)
        width = 1 << s
        yield [*(Send(real(other), c) for c in _chunks(int(start[s][other]), width, pof2,
                                                         edges)),
               *(Recv(real(other), c, reduce=True) for c in _chunks(int(start[s][v]), width,
                                                                    pof2, edges))]


def _wraps(n):
    """Messages a wrapped range adds on the critical path, per butterfly: one in each step
    from the third on (measured with :func:`pyar.cost.predict`, N <= 128)."""
    return max(0, _terms.log2(n) - 2)


def _halving_cost(n, count, m, topology):
    t = _terms.folded_doubling(n, count, m, True)
    return t._replace(messages=t.messages + _wraps(n))


def _doubling_cost(n, count, m, topology):
    t = _terms.folded_doubling(n, count, m, False)
    return t._replace(messages=t.messages + _wraps(n))


def _allreduce_cost(n, count, m, topology):
    t = _terms.fold(n, m, lambda p, k: _terms.Terms(2 * k, 2 * (p - 1) / p * m,
                                                     (p - 1) / p * m, 2 * k))
    return t._replace(messages=t.messages + 2 * _wraps(n))


@register_algorithm("bine", collective="reduce_scatter", exact=False, cost=_halving_cost)
def bine_reduce_scatter(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    edges = bounds(count, size)
    f = fold(rank, size, Chunk("data", 0, count), pair_block(rank, edges))
    return around(f, lambda: reduce_scatter_butterfly(f.newrank, f.pof2, f.bounds(edges),
                                                      f.real))


@register_algorithm("bine", collective="allgather", exact=False, cost=_doubling_cost)
def bine_allgather(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    edges = bounds(count, size)
    f = fold(rank, size, pair_block(rank, edges), Chunk("data", 0, count), reduce=False)
    return around(f, lambda: allgather_butterfly(f.newrank, f.pof2, f.bounds(edges), f.real))


@register_algorithm("bine", exact=False, cost=_allreduce_cost)
def bine_allreduce(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    everything = Chunk("data", 0, count)
    f = fold(rank, size, everything, everything)
    edges = bounds(count, f.pof2)
    return around(f, lambda: [*reduce_scatter_butterfly(f.newrank, f.pof2, edges, f.real),
                              *allgather_butterfly(f.newrank, f.pof2, edges, f.real)])
