"""Recursive doubling allreduce: log2(N) pairwise exchanges of the whole buffer.

In round k rank r exchanges everything with rank ``r XOR 2^k`` and folds in
what it receives; after ``log2 N`` rounds every rank holds the full result.
Other sizes use MPICH's fold (see ``_pof2``).

Steps: ``log2 N``, plus 2 on the ``2*rem`` folded ranks (``N = pof2 + rem``).
Bytes sent per rank: ``log2(pof2) * M`` (+ ``M`` on folded ranks).
Cost: ``log2 N * (alpha + M*beta + M*gamma)`` for a power of two. The best
latency of all, wasteful in bandwidth: for short messages.
Limits: any ``N >= 1``.

::

    round 0:  0 ◄─► 1   2 ◄─► 3
    round 1:  0 ◄─────► 2
                  1 ◄─────► 3
"""

from ..schedule import Chunk, Recv, Send, compact
from . import register_algorithm
from ._pof2 import fold


@register_algorithm("recursive_doubling")
def recursive_doubling(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    f = fold(rank, size, count)
    everything = Chunk("data", 0, count)
    exchanges = []
    if f.newrank >= 0:
        mask = 1
        while mask < f.pof2:
            peer = f.real(f.newrank ^ mask)
            exchanges.append([Send(peer, everything), Recv(peer, everything, reduce=True)])
            mask <<= 1
    return compact([*f.before, *exchanges, *f.after])
