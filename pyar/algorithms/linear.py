"""Linear all-to-all: every rank posts all its N-1 sends and receives at once.

MPICH's "scattered" and Open MPI's "linear" all-to-all: one step in which
rank r sends block i to rank i and receives rank i's block for it, for
every i; the network sorts out the order. In place, so incoming blocks land
in a buffer of ``(N-1)/N * M`` and are copied at the end.

Steps: 1. Bytes sent per rank: ``(N-1)/N * M``. Cost: ``alpha +
(N-1)/N*M*beta`` if the network takes every message at once (it does not:
``(N-1)*alpha`` more realistically; :mod:`pyar.model.cost`'s ports give ``(2N-3)
(alpha + M/N*beta)``). Limits: any ``N >= 1``; N-1 messages in
flight per rank: for short and medium messages.
"""

from ..core.schedule import Chunk, Recv, Send, compact, split
from . import register_algorithm
from ._terms import Terms


def _cost(n, count, m, topology):
    """All ``2(N-1)`` messages of a rank are ready at once; a message waits for its sender's
    and its receiver's ports, so the path alternates between them: ``2N-3`` blocks long."""
    return Terms(2 * n - 3, (2 * n - 3) / n * m, 0, 1)


@register_algorithm("linear", collective="alltoall", auto=True, cost=_cost)
def linear(rank, size, count, topology=None):
    blocks = [Chunk("data", lo, hi) for lo, hi in split(count, size)]
    others = [(rank + k) % size for k in range(1, size)]
    return compact([[*(Recv(peer, blocks[peer]) for peer in others),
                     *(Send(peer, blocks[peer]) for peer in others)]])
