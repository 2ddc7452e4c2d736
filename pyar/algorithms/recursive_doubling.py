"""Recursive doubling: log2(N) pairwise exchanges at doubling distances.

Allreduce: in round k rank r exchanges everything with rank ``r XOR 2^k`` and
folds in what it receives; after ``log2 N`` rounds every rank holds the full
result. Allgather: the same pairs exchange what they have gathered so far, a
range of blocks that doubles each round. Other sizes use MPICH's fold (see
``_pof2``).

Allreduce steps: ``log2 N`` (+2 on the ``2*rem`` folded ranks, ``N = pof2 + rem``).
Bytes sent per rank: ``log2(pof2) * M`` (+ ``M``). Cost:
``log2 N * (alpha + M*beta + M*gamma)`` for a power of two: the best latency
of all, wasteful in bandwidth, for short messages.
Allgather (``M`` = the gathered total): ``log2 N`` steps, ``(N-1)/N * M``
bytes sent, ``log2 N * alpha + (N-1)/N*M*beta``; a folded pair adds its
even rank's block and then ``M``.
Limits: any ``N >= 1``.

::

    round 0:  0 ◄─► 1   2 ◄─► 3
    round 1:  0 ◄─────► 2
                  1 ◄─────► 3
"""

from ..core.schedule import Chunk, Recv, Send, bounds
from . import _terms, register_algorithm
from ._pof2 import around, fold, pair_block


def allgather_doubling(newrank, pof2, edges, real):
    """Recursive doubling among ``pof2`` participants whose blocks end at ``edges``:
    participant v starts with block v and ends with all of them."""
    mask = 1
    while mask < pof2:
        peer = real(newrank ^ mask)
        mine = newrank & ~(mask - 1)
        theirs = mine ^ mask
        yield [Send(peer, Chunk("data", edges[mine], edges[mine + mask])),
               Recv(peer, Chunk("data", edges[theirs], edges[theirs + mask]))]
        mask *= 2


@register_algorithm("recursive_doubling", auto=True,
                    cost=lambda n, count, m, topology: _terms.fold(
                        n, m, lambda p, k: _terms.Terms(k, k * m, k * m, k)))
def recursive_doubling(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    everything = Chunk("data", 0, count)
    f = fold(rank, size, everything, everything)

    def exchanges():
        mask = 1
        while mask < f.pof2:
            peer = f.real(f.newrank ^ mask)
            yield [Send(peer, everything), Recv(peer, everything, reduce=True)]
            mask <<= 1
    return around(f, exchanges)


@register_algorithm("recursive_doubling", collective="allgather", auto=True,
                    cost=lambda n, count, m, topology: _terms.folded_doubling(
                        n, count, m, False))
def recursive_doubling_allgather(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    edges = bounds(count, size)
    f = fold(rank, size, pair_block(rank, edges), Chunk("data", 0, count), reduce=False)
    return around(f, lambda: allgather_doubling(f.newrank, f.pof2, f.bounds(edges), f.real))
