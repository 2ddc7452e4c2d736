"""Ring allreduce: a ring reduce-scatter followed by a ring allgather (seed 2.2).

The buffer is cut into ``N`` blocks as numpy.array_split cuts it. In the
reduce-scatter each rank passes one block to its right neighbour per step
and folds in the block arriving from its left; after ``N-1`` steps rank r
holds block r fully reduced. The allgather passes the reduced blocks round
the ring for another ``N-1`` steps.

Steps: ``2(N-1)``. Bytes sent per rank: ``2(N-1)/N * M`` (bandwidth-optimal;
uneven blocks add at most one element per step). Cost:
``2(N-1)*alpha + 2(N-1)/N*M*beta + (N-1)/N*M*gamma``.
Limits: any ``N >= 1``; latency grows linearly in N.

::

    step s, reduce-scatter:  r sends block r-s-1 ──► r+1, folds block r-s-2 from r-1

        ┌──► 0 ──► 1 ──► 2 ──► 3 ──┐
        └──────────────────────────┘
"""

from ..schedule import Chunk, Recv, Send, compact, split
from . import register_algorithm


def reduce_scatter(rank, size, count):
    """Ring reduce-scatter: afterwards rank r holds block r (of ``split(count, size)``) reduced."""
    blocks = split(count, size)
    right, left = (rank + 1) % size, (rank - 1) % size
    for s in range(size - 1):
        yield [Send(right, Chunk("data", *blocks[(rank - s - 1) % size])),
               Recv(left, Chunk("data", *blocks[(rank - s - 2) % size]), reduce=True)]


def allgather(rank, size, count):
    """Ring allgather: rank r starts with block r and ends with every block."""
    blocks = split(count, size)
    right, left = (rank + 1) % size, (rank - 1) % size
    for s in range(size - 1):
        yield [Send(right, Chunk("data", *blocks[(rank - s) % size])),
               Recv(left, Chunk("data", *blocks[(rank - s - 1) % size]))]


@register_algorithm("ring")
def ring(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    return compact([*reduce_scatter(rank, size, count), *allgather(rank, size, count)])
