"""Binomial trees: reduce to the root, broadcast from it, and their block-wise cousins.

Reduce: in round k, ranks with bit k set send their partial result to
``r - 2^k`` and drop out; the others fold in what ``r + 2^k`` sends.
Broadcast: the same tree backwards, each rank receiving from its parent and
then sending to its children, farthest first. Gather and scatter move the
ranks' blocks along the same tree (a subtree's blocks are contiguous).
The ``binomial`` allreduce is the reduce followed by the broadcast. Rooted
collectives are written for root 0 (the schedule renumbers for others).

Steps: ``ceil(log2 N)`` each way at the root. Bytes sent per rank: up to
``ceil(log2 N) * M`` (the root in the broadcast), ``M`` for a leaf.
Cost: reduce ``ceil(log2 N) * (alpha + M*beta + M*gamma)``, broadcast
``ceil(log2 N) * (alpha + M*beta)``, allreduce both.
Limits: any ``N >= 1``; the root's links carry every round, and every
round carries the whole message: for short messages.

::

    reduce                      broadcast
    round 0: 1►0  3►2  5►4 7►6  round 2: 0►4
    round 1: 2►0  6►4           round 1: 0►2  4►6
    round 2: 4►0                round 0: 0►1 2►3 4►5 6►7
"""

from ..core.schedule import Chunk, Recv, Send, compact
from . import _terms, register_algorithm


def _lowbit(rank, size):
    """The distance to ``rank``'s parent; for the root, a power of two >= size."""
    return rank & -rank if rank else 1 << (size - 1).bit_length()


def reduce_to_root(rank, size, everything):
    """Binomial reduce to rank 0 of the whole buffer."""
    mask = 1
    while mask < size:
        if rank & mask:
            yield [Send(rank - mask, everything)]
            return
        if rank + mask < size:
            yield [Recv(rank + mask, everything, reduce=True)]
        mask <<= 1


def bcast_from_root(rank, size, everything):
    """Binomial broadcast of the whole buffer from rank 0."""
    lowbit = _lowbit(rank, size)
    if rank:
        yield [Recv(rank - lowbit, everything)]
    mask = lowbit >> 1
    while mask:
        if rank + mask < size:
            yield [Send(rank + mask, everything)]
        mask >>= 1


def _blocks(edges, first, last, size):
    """The data chunk of blocks ``[first, min(last, size))``."""
    return Chunk("data", edges[first], edges[min(last, size)])


def gather_to_root(rank, size, edges):
    """Binomial gather to rank 0: rank r starts with block r (ending at ``edges``)."""
    lowbit = _lowbit(rank, size)
    mask = 1
    while mask < lowbit and rank + mask < size:
        yield [Recv(rank + mask, _blocks(edges, rank + mask, rank + 2 * mask, size))]
        mask <<= 1
    if rank:
        yield [Send(rank - lowbit, _blocks(edges, rank, rank + lowbit, size))]


def scatter_from_root(rank, size, edges):
    """Binomial scatter from rank 0: afterwards rank r holds block r (ending at ``edges``)."""
    lowbit = _lowbit(rank, size)
    if rank:
        yield [Recv(rank - lowbit, _blocks(edges, rank, rank + lowbit, size))]
    mask = lowbit >> 1
    while mask:
        if rank + mask < size:
            yield [Send(rank + mask, _blocks(edges, rank + mask, rank + 2 * mask, size))]
        mask >>= 1


@register_algorithm("binomial", auto=True,
                    cost=lambda n, count, m, topology: _terms.add(
                        _terms.binomial_tree(n, m, True), _terms.binomial_tree(n, m, False)))
def binomial(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    everything = Chunk("data", 0, count)
    return compact([*reduce_to_root(rank, size, everything),
                    *bcast_from_root(rank, size, everything)])


@register_algorithm("binomial", collective="reduce", auto=True,
                    cost=lambda n, count, m, topology: _terms.binomial_tree(n, m, True))
def binomial_reduce(rank, size, count, topology=None):
    return compact(reduce_to_root(rank, size, Chunk("data", 0, count)))


@register_algorithm("binomial", collective="bcast", auto=True,
                    cost=lambda n, count, m, topology: _terms.binomial_tree(n, m, False))
def binomial_bcast(rank, size, count, topology=None):
    return compact(bcast_from_root(rank, size, Chunk("data", 0, count)))
