"""Swing allreduce, bandwidth-optimal: a halving reduce-scatter and a doubling allgather on
Swing's peers.

Rabenseifner's algorithm with the partner of step s being Swing's
(``r + rho(s)`` for even r, ``r - rho(s)`` for odd, ``rho = 1, -1, 3, -5, ...``;
De Sensi et al., NSDI 2024, peers in ``_swing``). Reduce-scatter: in step s
rank r keeps the half of its current block range that its next group owns,
sends the other half to its peer and folds in the peer's copy of the half it
keeps, so the largest messages go to the nearest peers (distance 1, then 1,
3, 5, ...); the allgather retraces the steps backwards. The blocks are laid
out in the order of Swing's butterfly (``_swing.layout``), so every range is
contiguous and each step is one message each way; rank r ends the
reduce-scatter with the block at position ``layout.key[r]``, not block r
(so this is an allreduce only). Every block is reduced once, on its owner,
and copied from there: every rank ends with the same bits. Other rank
counts fold onto the power of two below as the authors' library does
(``_swing``: rank ``P+i`` hands its data to rank ``P+i-E``, ``N = P + E``).

Steps: ``2 log2 P`` (+2 on the ``2E`` folded ranks). Bytes sent per rank:
``2(P-1)/P * M`` (+ ``M`` on folded ranks). Cost:
``2 log2 N * alpha + 2(N-1)/N*M*beta + (N-1)/N*M*gamma`` for a power of two
(+ ``2 alpha + 2M beta + M gamma`` otherwise): Rabenseifner's;
this closed form (``auto``'s) has no links, so it predicts no gain; on a machine
with a network :func:`pyar.model.cost.predict` charges the most loaded link.
Parameters: ``dims`` (``8x8``: the torus the ranks sit on) and ``ports`` (1 to
``2D``): the paper's multi-dimensional and multi-port Swing (``_swing``).
Limits: any ``N >= 1`` in one dimension; with ``dims``, their product.

::

    N = 8, block positions 0..7 (rank:position 0:0 1:4 2:6 3:1 4:2 5:7 6:5 7:3)
    reduce-scatter                              allgather (backwards)
    step 0: 0◄►1 2◄►3 ... 4 blocks              step 3: 0◄►3 2◄►5 ... 1 block
    step 1: 0◄►7 2◄►1 ... 2 blocks              step 4: 0◄►7 2◄►1 ... 2 blocks
    step 2: 0◄►3 2◄►5 ... 1 block               step 5: 0◄►1 2◄►3 ... 4 blocks
"""

from ..core.schedule import Chunk, Recv, Send, bounds, split
from . import _terms, register_algorithm
from ._pof2 import around
from ._swing import fold, group, layout, peer, torus


def _halves(v, shape, port, edges):
    """Per step of ``port``: (peer, the range v keeps, the range it hands over) as chunks."""
    lay = layout(shape, port)
    key = lay.key
    for s in range(lay.steps):
        other = peer(v, s, shape, port)
        keep, give = (group(int(key[v]), s + 1, lay.steps),
                      group(int(key[other]), s + 1, lay.steps))
        yield (other, Chunk("data", edges[keep[0]], edges[keep[1]]),
               Chunk("data", edges[give[0]], edges[give[1]]))


@register_algorithm("swing_bandwidth",
                    cost=lambda n, count, m, topology: _terms.fold(n, m, lambda p, k: _terms.Terms(
                        2 * k, 2 * (p - 1) / p * m, (p - 1) / p * m, 2 * k)))
def swing_bandwidth(rank, size, count, topology=None, *, dims="", ports=1):
    shape = torus(dims, size, ports)
    if size == 1 or count == 0:
        return []
    f = fold(rank, size, Chunk("data", 0, count))

    def phases():
        ports_halves = [list(_halves(f.newrank, shape, port, bounds(hi - lo, f.pof2, lo)))
                        for port, (lo, hi) in enumerate(split(count, ports))]
        steps = list(zip(*ports_halves))            # per step, every port's (peer, keep, give)
        yield from ([op for other, keep, give in step                     # reduce-scatter
                     for op in (Send(other, give), Recv(other, keep, reduce=True))]
                    for step in steps)
        yield from ([op for other, keep, give in step                     # allgather
                     for op in (Send(other, keep), Recv(other, give))]
                    for step in reversed(steps))
    return around(f, phases)
