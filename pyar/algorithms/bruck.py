"""Bruck's allgather: ceil(log2 N) rounds at doubling distances, for any N.

In round k rank r sends the ``min(2^k, N - 2^k)`` blocks it has gathered,
``r, r+1, ...`` (mod N), to rank ``r - 2^k`` and receives the next ones,
``r + 2^k, ...``, from rank ``r + 2^k``. Blocks keep their place in the
buffer, so a range that wraps round the end travels as two messages and no
final rotation is needed.

Steps: ``ceil(log2 N)``. Bytes sent per rank: ``(N-1)/N * M`` (``M`` = the
gathered total). Cost: ``ceil(log2 N) * alpha + (N-1)/N*M*beta``: recursive
doubling's latency without its power-of-two fold: for short messages.
Limits: any ``N >= 1``.

::

    N = 5, rank 0:  round 0: gets 1 from 1    round 1: gets 2,3 from 2
                    round 2: gets 4 from 4
"""

from ..core.schedule import Chunk, Recv, Send, bounds, compact
from . import register_algorithm
from ._terms import Terms, ceil_log2


def _wrapped(edges, first, n, size):
    """Chunks of the ``n`` blocks from ``first`` on, mod ``size`` (two when they wrap)."""
    last = first + n
    if last <= size:
        return [Chunk("data", edges[first], edges[last])]
    return [Chunk("data", edges[first], edges[size]), Chunk("data", 0, edges[last - size])]


def _cost(n, count, m, topology):
    """``ceil(log2 N)`` rounds; a round that passes two or more blocks wraps round the end
    of the buffer on some rank, which then sends it as two messages."""
    rounds = [min(d, n - d) for d in (1 << i for i in range(ceil_log2(n)))]
    return Terms(sum(1 if b == 1 else 2 for b in rounds), (n - 1) / n * m, 0, len(rounds))


@register_algorithm("bruck", collective="allgather", auto=True, cost=_cost)
def bruck(rank, size, count, topology=None):
    edges = bounds(count, size)
    steps = []
    distance = 1
    while distance < size:
        n = min(distance, size - distance)
        to, source = (rank - distance) % size, (rank + distance) % size
        steps.append([*(Send(to, c) for c in _wrapped(edges, rank, n, size)),
                      *(Recv(source, c) for c in _wrapped(edges, source, n, size))])
        distance *= 2
    return compact(steps)
