"""Binomial-tree allreduce: a binomial reduce to rank 0, then a binomial broadcast from it.

Reduce: in round k, ranks with bit k set send their partial result to
``r - 2^k`` and drop out; the others fold in what ``r + 2^k`` sends.
Broadcast: the same tree backwards, each rank receiving from its parent and
then sending to its children, farthest first.

Steps: up to ``ceil(log2 N)`` each way (rank 0 does both in full).
Bytes sent per rank: at most ``ceil(log2 N) * M`` (rank 0 in the broadcast),
``M`` for a leaf. Cost: ``2 ceil(log2 N) * (alpha + M*beta) + ceil(log2 N)*M*gamma``.
Limits: any ``N >= 1``; rank 0's links carry every round.

::

    reduce                      broadcast
    round 0: 1►0  3►2  5►4 7►6  round 2: 0►4
    round 1: 2►0  6►4           round 1: 0►2  4►6
    round 2: 4►0                round 0: 0►1 2►3 4►5 6►7
"""

from ..schedule import Chunk, Recv, Send, compact
from . import register_algorithm


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
    lowbit = rank & -rank if rank else 1 << (size - 1).bit_length()
    if rank:
        yield [Recv(rank - lowbit, everything)]
    mask = lowbit >> 1
    while mask:
        if rank + mask < size:
            yield [Send(rank + mask, everything)]
        mask >>= 1


@register_algorithm("binomial")
def binomial(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    everything = Chunk("data", 0, count)
    return compact([*reduce_to_root(rank, size, everything),
                    *bcast_from_root(rank, size, everything)])
