"""Van de Geijn's broadcast: a binomial scatter from the root, then a ring allgather.

The root's buffer is cut into ``N`` blocks; the scatter leaves block r on
rank r, the ring allgather gives every rank all of them. Written for root 0
(the schedule renumbers for others).

Steps: ``ceil(log2 N)`` + ``N-1``. Bytes sent per rank: ``(N-1)/N * M`` in
the allgather, plus at most ``(N-1)/N * M`` by the root in the scatter:
about ``2M`` in all against binomial's ``log2 N * M`` at the root. Cost:
``(log2 N + N-1) * alpha + 2(N-1)/N*M*beta``: for long messages.
Limits: any ``N >= 1``.
"""

from ..core.schedule import bounds, compact
from . import _terms, register_algorithm, ring
from .binomial import scatter_from_root


@register_algorithm("scatter_allgather", collective="bcast", auto=True,
                    cost=lambda n, count, m, topology: _terms.add(
                        _terms.gather(n, count, m), _terms.ring(n, m, 1, 0)))
def scatter_allgather(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    return compact([*scatter_from_root(rank, size, bounds(count, size)),
                    *ring.allgather(rank, range(size), 0, count)])
