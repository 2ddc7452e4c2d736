"""Rabenseifner allreduce: recursive-halving reduce-scatter, recursive-doubling allgather.

Among ``pof2`` ranks the buffer is cut into ``pof2`` blocks. Reduce-scatter:
in round k rank r exchanges half of its current block range with
``r XOR pof2/2^(k+1)``, keeping the half that contains block r, so message
sizes halve each round; afterwards rank r holds block r reduced. Allgather:
the reverse, distances doubling, ranges merging. Other sizes use MPICH's fold
(see ``_pof2``).

Steps: ``2 log2(pof2)``, plus 2 on the ``2*rem`` folded ranks.
Bytes sent per rank: ``2(pof2-1)/pof2 * M`` (+ ``M`` on folded ranks).
Cost: ``2 log2 N * alpha + 2(N-1)/N*M*beta + (N-1)/N*M*gamma`` for a power
of two: ring's bandwidth with tree latency. Limits: any ``N >= 1``.

::

    halving (M/2, M/4, ...)         doubling (..., M/4, M/2)
    0 ◄─────► 2    1 ◄─────► 3      0 ◄─► 1    2 ◄─► 3
    0 ◄─► 1        2 ◄─► 3          0 ◄─────► 2    1 ◄─────► 3
"""

from ..schedule import Chunk, Recv, Send, compact, split
from . import register_algorithm
from ._pof2 import fold


def _span(blocks, first, last):
    """The data chunk covering blocks ``[first, last)``."""
    return Chunk("data", blocks[first][0], blocks[last - 1][1])


def reduce_scatter_halving(newrank, pof2, count, real):
    """Recursive halving among ``pof2`` ranks: afterwards ``newrank`` holds its block reduced."""
    blocks = split(count, pof2)
    lo, hi = 0, pof2
    mask = pof2 // 2
    while mask:
        peer = real(newrank ^ mask)
        mid = (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if newrank & mask else ((lo, mid), (mid, hi))
        yield [Send(peer, _span(blocks, *give)), Recv(peer, _span(blocks, *keep), reduce=True)]
        lo, hi = keep
        mask //= 2


def allgather_doubling(newrank, pof2, count, real):
    """Recursive doubling among ``pof2`` ranks: from its own block to all ``pof2`` blocks."""
    blocks = split(count, pof2)
    mask = 1
    while mask < pof2:
        peer = real(newrank ^ mask)
        mine = newrank & ~(mask - 1)
        theirs = mine ^ mask
        yield [Send(peer, _span(blocks, mine, mine + mask)),
               Recv(peer, _span(blocks, theirs, theirs + mask))]
        mask *= 2


@register_algorithm("rabenseifner")
def rabenseifner(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    f = fold(rank, size, count)
    middle = []
    if f.newrank >= 0:
        middle = [*reduce_scatter_halving(f.newrank, f.pof2, count, f.real),
                  *allgather_doubling(f.newrank, f.pof2, count, f.real)]
    return compact([*f.before, *middle, *f.after])
