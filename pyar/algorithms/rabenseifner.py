"""Rabenseifner allreduce: recursive-halving reduce-scatter, recursive-doubling allgather.

Among ``pof2`` ranks the buffer is cut into ``pof2`` blocks. Reduce-scatter:
in round k rank r exchanges half of its current block range with
``r XOR pof2/2^(k+1)``, keeping the half that contains block r, so message
sizes halve each round; afterwards rank r holds block r reduced. Allgather:
the reverse, distances doubling, ranges merging. Other sizes use MPICH's fold
(see ``_pof2``). The two halves are the ``recursive_halving`` reduce-scatter
and the ``recursive_doubling`` allgather, on ``pof2`` blocks.

Steps: ``2 log2(pof2)``, plus 2 on the ``2*rem`` folded ranks.
Bytes sent per rank: ``2(pof2-1)/pof2 * M`` (+ ``M`` on folded ranks).
Cost: ``2 log2 N * alpha + 2(N-1)/N*M*beta + (N-1)/N*M*gamma`` for a power
of two: ring's bandwidth with tree latency. Limits: any ``N >= 1``.

::

    halving (M/2, M/4, ...)         doubling (..., M/4, M/2)
    0 ◄─────► 2    1 ◄─────► 3      0 ◄─► 1    2 ◄─► 3
    0 ◄─► 1        2 ◄─► 3          0 ◄─────► 2    1 ◄─────► 3
"""

from ..core.schedule import Chunk, bounds
from . import _terms, register_algorithm
from ._pof2 import around, fold
from .recursive_doubling import allgather_doubling
from .recursive_halving import reduce_scatter_halving


@register_algorithm("rabenseifner", auto=True,
                    cost=lambda n, count, m, topology: _terms.fold(n, m, lambda p, k: _terms.Terms(
                        2 * k, 2 * (p - 1) / p * m, (p - 1) / p * m, 2 * k)))
def rabenseifner(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    everything = Chunk("data", 0, count)
    f = fold(rank, size, everything, everything)
    edges = bounds(count, f.pof2)
    return around(f, lambda: [*reduce_scatter_halving(f.newrank, f.pof2, edges, f.real),
                              *allgather_doubling(f.newrank, f.pof2, edges, f.real)])
