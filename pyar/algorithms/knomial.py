"""k-nomial trees: broadcast from the root, reduce to it, and both (allreduce), radix ``k``.

Rank ``r`` (relative to the root) written in base ``k``: its parent is ``r``
with its lowest nonzero digit cleared, its children are ``r + m*k^j`` for
``m = 1..k-1`` and every level ``j`` below that digit (for the root, below
``L = ceil(log_k N)``). Broadcast: a rank receives from its parent, then
sends to the children of each level, highest level first, a level's ``k-1``
sends in one step. Reduce: the same tree backwards, lowest level first, a
level's ``k-1`` receives folded in one step in the order ``m = 1..k-1``,
then the partial result goes to the parent. Only the root's result is
defined, so one rank's fold order is all there is to fix. The ``knomial``
allreduce is the reduce to rank 0 followed by the broadcast from it: every
rank gets rank 0's bits. ``k = 2`` is the binomial tree (the same schedules
as ``binomial``). Rooted at rank 0 (the schedule renumbers for other roots).

Parameter: the radix ``k >= 2`` (``knomial:k=4``); default 2, MPICH's
``MPIR_CVAR_*_TREE_KVAL``. Steps: ``L`` at the root, ``L`` levels of up to
``k-1`` messages of ``M`` bytes each; a leaf sends or receives one. With
``c_j = min(k-1, (N-1) // k^j)`` children of the root at level ``j``, the
root's path is the critical one: broadcast ``sum_j (alpha*c_j + c_j*M*beta)``
over ``L`` steps, reduce the same plus ``sum_j c_j*M*gamma``, allreduce
both. A rank's
messages leave one after another through its one port, so ``k > 2`` saves
steps (``delta``), never messages: ``(k-1) log_k N >= log2 N``; ``auto``
keeps to ``binomial``. Limits: any ``N >= 1``.

::

    broadcast, k = 3, N = 9          reduce: the arrows reversed,
    step 0: 0 ─► 3, 6                  step 0: 1, 2 ─► 0   4, 5 ─► 3   7, 8 ─► 6
    step 1: 0 ─► 1, 2   3 ─► 4, 5      step 1: 3, 6 ─► 0
            6 ─► 7, 8
"""

from ..core.schedule import Chunk, Recv, Send, compact
from . import register_algorithm
from ._terms import Terms, add


def radix(k) -> int:
    """``k`` if it is an int >= 2; ValueError otherwise."""
    if type(k) is not int or k < 2:
        raise ValueError(f"k (the radix) must be an int >= 2, got {k!r}")
    return k


def _span(rank, size, k):
    """``k^j`` of ``rank``'s lowest nonzero base-k digit; for the root, the least power of
    ``k`` >= size."""
    span = 1
    if rank == 0:
        while span < size:
            span *= k
        return span
    while (rank // span) % k == 0:
        span *= k
    return span


def bcast_from_root(rank, size, k, everything):
    """k-nomial broadcast of ``everything`` from rank 0."""
    span = _span(rank, size, k)
    if rank:
        yield [Recv(rank - (rank // span) % k * span, everything)]
    span //= k
    while span:
        yield [Send(rank + m * span, everything) for m in range(1, k) if rank + m * span < size]
        span //= k


def reduce_to_root(rank, size, k, everything):
    """k-nomial reduce of ``everything`` to rank 0."""
    span = 1
    while span < size:
        digit = (rank // span) % k
        if digit:
            yield [Send(rank - digit * span, everything)]
            return
        yield [Recv(rank + m * span, everything, reduce=True)
               for m in range(1, k) if rank + m * span < size]
        span *= k


def tree_cost(n, m, k, reduce):
    """The root's path: per level ``j``, ``c_j`` messages of ``M`` bytes (folded if ``reduce``)."""
    messages = steps = 0
    span = 1
    while span < n:
        messages += min(k - 1, (n - 1) // span)
        steps += 1
        span *= k
    return Terms(messages, messages * m, messages * m if reduce else 0, steps)


@register_algorithm("knomial", collective="bcast",
                    cost=lambda n, count, m, topology, *, k=2: tree_cost(n, m, k, False))
def knomial_bcast(rank, size, count, topology=None, *, k=2):
    radix(k)
    return compact(bcast_from_root(rank, size, k, Chunk("data", 0, count)))


@register_algorithm("knomial", collective="reduce",
                    cost=lambda n, count, m, topology, *, k=2: tree_cost(n, m, k, True))
def knomial_reduce(rank, size, count, topology=None, *, k=2):
    radix(k)
    return compact(reduce_to_root(rank, size, k, Chunk("data", 0, count)))


@register_algorithm("knomial",
                    cost=lambda n, count, m, topology, *, k=2: add(tree_cost(n, m, k, True),
                                                                   tree_cost(n, m, k, False)))
def knomial(rank, size, count, topology=None, *, k=2):
    radix(k)
    everything = Chunk("data", 0, count)
    return compact([*reduce_to_root(rank, size, k, everything),
                    *bcast_from_root(rank, size, k, everything)])
