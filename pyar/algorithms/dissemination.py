"""Dissemination barrier: in round k every rank signals ``r + 2^k`` and waits for ``r - 2^k``.

After ``ceil(log2 N)`` rounds every rank has heard, directly or through
others, from every rank, so none leaves before all have arrived. Messages
carry no data (zero-element chunks, kept on purpose).

Steps: ``ceil(log2 N)``. Bytes: none. Cost: ``ceil(log2 N) * alpha``.
Limits: any ``N >= 1``.
"""

from ..core.schedule import Chunk, Recv, Send, Step
from . import register_algorithm
from ._terms import Terms, ceil_log2

SIGNAL = Chunk("data", 0, 0)


@register_algorithm("dissemination", collective="barrier", auto=True,
                    cost=lambda n, count, m, topology: Terms(ceil_log2(n), 0, 0, ceil_log2(n)))
def dissemination(rank, size, count=0, topology=None):
    steps = []
    distance = 1
    while distance < size:
        steps.append(Step([Send((rank + distance) % size, SIGNAL),
                           Recv((rank - distance) % size, SIGNAL)]))
        distance *= 2
    return steps
