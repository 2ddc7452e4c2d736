"""Segmented (pipelined) ring allreduce: the ring with its blocks cut into segments.

Open MPI's segmented ring, Gloo's chunked ring: each block travels as
segments of at most ``segment`` elements (default :data:`pyar.core.schedule.SEGMENT`),
one per step, so a rank forwards segment k while it receives k+1 and folds
a piece that is still in cache; the landing buffer is one segment, not one
block. Same bytes as ``ring``.

Steps: ``2(N-1) * G`` with ``G = ceil(ceil(M/N) / segment)`` segments per block.
Cost: ``2(N-1)*G*alpha + 2(N-1)/N*M*beta + (N-1)/N*M*gamma``: more latency
terms than ``ring``, bought back on large messages. Limits: any ``N >= 1``.
Parameter: ``segment`` (elements), e.g. ``segmented_ring:segment=4096``.
"""

from ..core.schedule import SEGMENT, compact, pieces
from . import _terms, register_algorithm, ring


def _cost(n, count, m, topology, *, segment=SEGMENT):
    """Ring's bytes in ``G`` times its messages, one segment per step."""
    g = pieces(-(-count // n), segment)
    t = _terms.ring(n, m, 2, 1)
    return _terms.Terms(g * t.messages, t.bytes, t.folded, g * t.steps)


@register_algorithm("segmented_ring", auto=True, cost=_cost)
def segmented_ring(rank, size, count, topology=None, *, segment=SEGMENT):
    pieces(1, segment)      # segment must be an int >= 1
    if size == 1 or count == 0:
        return []
    return compact(ring.allreduce(rank, range(size), 0, count, segment))


def _table(size, count, topology=None, *, segment=SEGMENT):
    """Every rank's steps at once (what :func:`segmented_ring` returns, as one Table)."""
    pieces(1, segment)
    return ring.table_of(size, count, ((1, True), (0, False)), segment)


def _waves(size, count, topology=None, *, segment=SEGMENT):
    """The same messages a step at a time (:func:`pyar.algorithms.ring.waves_of`)."""
    pieces(1, segment)
    return ring.waves_of(size, count, ((1, True), (0, False)), segment)


segmented_ring.table = _table
segmented_ring.waves = _waves
