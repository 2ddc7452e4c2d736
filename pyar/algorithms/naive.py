"""Naive allreduce: every rank sends to rank 0, which reduces and sends the result back.

The central aggregator: a linear reduce to rank 0 followed by a
linear broadcast.

Steps: 2 on every rank. Bytes sent: rank 0 sends ``(N-1)*M``, the others
``M``; rank 0 receives ``(N-1)*M`` and needs ``(N-1)*M`` of landing space.
Cost (rank 0's links serialise): ``2(N-1)(alpha + M*beta) + (N-1)*M*gamma``.
Limits: any ``N >= 1``; no bandwidth of any rank but 0 is used.

::

    reduce          broadcast
    1 ──┐           ┌──► 1
    2 ──┼──► 0  0 ──┼──► 2
    3 ──┘           └──► 3
"""

from ..core.schedule import Chunk, Recv, Send, compact
from . import register_algorithm
from ._terms import Terms


@register_algorithm("naive", auto=True, cost=lambda n, count, m, topology: Terms(
    2 * (n - 1), 2 * (n - 1) * m, (n - 1) * m, 2))
def naive(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    everything = Chunk("data", 0, count)
    others = range(1, size)
    if rank == 0:
        reduce = [Recv(peer, everything, reduce=True) for peer in others]
        broadcast = [Send(peer, everything) for peer in others]
    else:
        reduce = [Send(0, everything)]
        broadcast = [Recv(0, everything)]
    return compact([reduce, broadcast])
