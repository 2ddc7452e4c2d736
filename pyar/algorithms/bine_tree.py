"""Bine trees: binomial broadcast and reduce on negabinary rank numbers (SC 2025).

A binomial tree whose edges of level k join ranks ``|rho(k)| = 1, 1, 3, 5, 11,
...`` apart instead of ``2^k`` (De Sensi et al., "Bine Trees: Enhancing
Collective Operations by Optimizing Communication Locality", SC 2025; the
tree in ``_bine``): the root sends first to the farthest child, ``rho(L-1)``
away, and every rank that has the data sends on in every later step, to
nearer and nearer children. Reduce is the same tree backwards, children
folding into parents. For ``N = P + E`` ranks (``P`` the power of two below),
the tree spans relative ranks ``0..P-1`` and rank ``P+i`` is a leaf of rank
``P+i-E`` (E ranks away): broadcast hands it the data after the tree,
reduce folds its data in before. Rooted at 0 (the schedule renumbers for
other roots).

Steps: ``ceil(log2 N)`` at the root. Bytes sent per rank: up to
``ceil(log2 N) * M`` (the root in the broadcast), ``M`` for a leaf.
Cost: broadcast ``ceil(log2 N) * (alpha + M*beta)``, reduce
``ceil(log2 N) * (alpha + M*beta + M*gamma)``: binomial's; :mod:`pyar.cost`
has no link distances, so it predicts no gain. Limits: any ``N >= 1``;
every round carries the whole message: for short messages.

::

    broadcast, N = 8 (numerals n: 0:000 1:001 2:110 3:111 4:100 5:101 6:010 7:011)
    step 2: 0 ──► 3              (flip 3 digits: rho(2) = 3)
    step 1: 0 ──► 7   3 ──► 4    (flip 2 digits: rho(1) = -1)
    step 0: 0 ──► 1   3 ──► 2   7 ──► 6   4 ──► 5
"""

from ..core.schedule import Chunk, Recv, Send, compact
from . import _terms, register_algorithm
from ._bine import flip, receives_at


def _tree(v, pof2):
    """(parent or -1, the step it receives in, children in the order it sends to them)."""
    k = receives_at(v, pof2)
    parent = flip(v, k, pof2) if v else -1
    return parent, [flip(v, j, pof2) for j in range(k - 1, -1, -1)]


def bcast_from_root(rank, size, everything):
    """Bine broadcast of the whole buffer from rank 0."""
    pof2 = 1 << (size.bit_length() - 1)
    extra = size - pof2
    if rank >= pof2:
        yield [Recv(rank - extra, everything)]
        return
    parent, children = _tree(rank, pof2)
    if parent >= 0:
        yield [Recv(parent, everything)]
    for child in children:
        yield [Send(child, everything)]
    if rank + extra >= pof2:
        yield [Send(rank + extra, everything)]


def reduce_to_root(rank, size, everything):
    """Bine reduce of the whole buffer to rank 0."""
    pof2 = 1 << (size.bit_length() - 1)
    extra = size - pof2
    if rank >= pof2:
        yield [Send(rank - extra, everything)]
        return
    if rank + extra >= pof2:
        yield [Recv(rank + extra, everything, reduce=True)]
    parent, children = _tree(rank, pof2)
    for child in reversed(children):
        yield [Recv(child, everything, reduce=True)]
    if parent >= 0:
        yield [Send(parent, everything)]


@register_algorithm("bine", collective="bcast",
                    cost=lambda n, count, m, topology: _terms.binomial_tree(n, m, False))
def bine_bcast(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    return compact(bcast_from_root(rank, size, Chunk("data", 0, count)))


@register_algorithm("bine", collective="reduce",
                    cost=lambda n, count, m, topology: _terms.binomial_tree(n, m, True))
def bine_reduce(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    return compact(reduce_to_root(rank, size, Chunk("data", 0, count)))
