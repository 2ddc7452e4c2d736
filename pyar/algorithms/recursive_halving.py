"""Recursive-halving reduce-scatter: log2(N) exchanges of halving ranges.

In round k rank r exchanges half of its current block range with
``r XOR pof2/2^(k+1)``: it sends the half it will not keep and folds in the
half it keeps, so message sizes halve each round; afterwards rank r holds
block r reduced. Other sizes use MPICH's fold (see ``_pof2``): the odd rank
of a pair reduces for both and hands the even rank its block at the end.
The first half of ``rabenseifner``.

Steps: ``log2 pof2`` (+2 on the ``2*rem`` folded ranks).
Bytes sent per rank: ``(pof2-1)/pof2 * M`` (+ ``M`` by a folded even rank).
Cost: ``log2 N * alpha + (N-1)/N*M*(beta + gamma)`` for a power of two.
Limits: any ``N >= 1``.

::

    round 0: 0 ◄── blocks 2,3 / 0,1 ──► 2     1 ◄──► 3
    round 1: 0 ◄── block 1 / block 0 ──► 1    2 ◄──► 3
"""

from ..core.schedule import Chunk, Recv, Send, bounds, compact
from . import _terms, register_algorithm
from ._pof2 import fold, pair_block


def reduce_scatter_halving(newrank, pof2, edges, real):
    """Recursive halving among ``pof2`` participants whose blocks end at ``edges``:
    afterwards participant v holds block v reduced."""
    lo, hi = 0, pof2
    mask = pof2 // 2
    while mask:
        peer = real(newrank ^ mask)
        mid = (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if newrank & mask else ((lo, mid), (mid, hi))
        yield [Send(peer, Chunk("data", edges[give[0]], edges[give[1]])),
               Recv(peer, Chunk("data", edges[keep[0]], edges[keep[1]]), reduce=True)]
        lo, hi = keep
        mask //= 2


def reduce_scatter(rank, size, count):
    """Op lists after which rank r holds block r of ``split(count, size)`` reduced."""
    edges = bounds(count, size)
    f = fold(rank, size, Chunk("data", 0, count), pair_block(rank, edges))
    middle = []
    if f.newrank >= 0:
        middle = reduce_scatter_halving(f.newrank, f.pof2, f.bounds(edges), f.real)
    return [*f.before, *middle, *f.after]


@register_algorithm("recursive_halving", collective="reduce_scatter", auto=True,
                    cost=lambda n, count, m, topology: _terms.folded_doubling(
                        n, count, m, True))
def recursive_halving(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    return compact(reduce_scatter(rank, size, count))
