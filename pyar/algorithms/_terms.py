"""Closed-form cost terms, and the pieces the algorithms' closed forms share.

A closed form is ``cost(size, count, nbytes, topology) -> Terms``: the
counts along the critical path of the algorithm's schedule for ``size > 1``
ranks and ``count > 0`` elements of ``nbytes`` bytes in all (see
:mod:`pyar.model.cost`, which re-exports :class:`Terms`).
"""

from __future__ import annotations

from typing import NamedTuple


class Terms(NamedTuple):
    """A time as counts along its critical path: messages, bytes sent, bytes folded, steps."""

    messages: float
    bytes: float
    folded: float
    steps: float


def log2(n: int) -> int:
    return n.bit_length() - 1


def ceil_log2(n: int) -> int:
    return (n - 1).bit_length()


def add(*parts: Terms) -> Terms:
    return Terms(*map(sum, zip(*parts)))


def ring(n: int, m: float, phases: int, folds: int) -> Terms:
    """``phases`` ring passes of ``N-1`` steps over ``N`` blocks, ``folds`` of them reducing."""
    return Terms(phases * (n - 1), phases * (n - 1) / n * m, folds * (n - 1) / n * m,
                 phases * (n - 1))


def fold(size: int, nbytes: float, middle) -> Terms:
    """``middle(pof2, log2 pof2)`` plus MPICH's fold of the ranks beyond the power of two."""
    pof2 = 1 << log2(size)
    t = middle(pof2, log2(pof2))
    if size == pof2:
        return t
    return Terms(t.messages + 2, t.bytes + 2 * nbytes, t.folded + nbytes, t.steps + 2)


def folded_doubling(n: int, count: int, m: float, reduce: bool) -> Terms:
    """Recursive halving (``reduce``) or doubling over the blocks of ``n`` ranks, MPICH's fold.

    Participant 0 stands for ranks 0 and 1, so its range always holds the
    most (and the largest) blocks and it is the last to start: the critical
    path is its fold (``M`` in, folded if ``reduce``), its ``log2 pof2``
    exchanges (each as long as the range it keeps or has gathered: ``2^k``
    participants, ``min(rem, 2^k)`` of them two blocks) and the handover of
    block 0 (reduce-scatter) or of everything (allgather) to rank 0. Exact
    for any count.
    """
    pof2 = 1 << log2(n)
    rem, k = n - pof2, log2(n)
    q, r = divmod(count, n)
    per = m / count

    def upto(i):        # bytes of blocks [0, i)
        return (i * q + min(i, r)) * per

    ranges = sum(upto((1 << i) + min(rem, 1 << i)) for i in range(k))
    if not rem:
        return Terms(k, ranges, ranges if reduce else 0, k)
    first, last = (m, upto(1)) if reduce else (upto(1), m)
    return Terms(k + 2, first + ranges + last, m + ranges if reduce else 0, k + 2)


def binomial_tree(n: int, m: float, reduce: bool) -> Terms:
    """Binomial reduce (``reduce``) or broadcast of the whole buffer: ``ceil(log2 N)`` rounds."""
    k = ceil_log2(n)
    return Terms(k, k * m, k * m if reduce else 0, k)


def gather(n: int, count: int, m: float) -> Terms:
    """Binomial gather (or scatter) of blocks: the root's ``ceil(log2 N)`` messages carry
    every block but its own (block 0, the largest), one after another, and no other path
    is longer."""
    k = ceil_log2(n)
    return Terms(k, m - -(-count // n) * m / count, 0, k)
