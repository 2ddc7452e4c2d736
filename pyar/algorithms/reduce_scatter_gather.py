"""Rabenseifner's reduce: a recursive-halving reduce-scatter, then a binomial gather to the root.

The reduce-scatter leaves block r reduced on rank r (see
``recursive_halving``); the gather collects the blocks on the root along a
binomial tree, each subtree's blocks travelling as one message. Written for
root 0 (the schedule renumbers for others).

Steps: ``log2 N`` + ``ceil(log2 N)`` (+2 on folded ranks). Bytes sent per
rank: at most ``2(N-1)/N * M`` (+ ``M``). Cost for a power of two:
``2 log2 N * alpha + 2(N-1)/N*M*beta + (N-1)/N*M*gamma``: binomial reduce's
``log2 N * M`` bytes down to about ``2M``, for long messages.
Limits: any ``N >= 1``.
"""

from ..core.schedule import bounds, compact
from . import _terms, register_algorithm
from .binomial import gather_to_root
from .recursive_halving import reduce_scatter


@register_algorithm("reduce_scatter_gather", collective="reduce", auto=True,
                    cost=lambda n, count, m, topology: _terms.add(
                        _terms.folded_doubling(n, count, m, True), _terms.gather(n, count, m)))
def reduce_scatter_gather(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    return compact([*reduce_scatter(rank, size, count),
                    *gather_to_root(rank, size, bounds(count, size))])
