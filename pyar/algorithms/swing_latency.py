"""Swing allreduce, latency-optimal: log2(N) exchanges of the whole buffer with Swing's peers.

In step s rank r swaps everything with ``r + rho(s)`` (r even) or ``r - rho(s)``
(r odd), ``rho = 1, -1, 3, -5, 11, ...``, and folds in what it receives
(De Sensi et al., "Swing: Short-cutting Rings for Higher Bandwidth
Allreduce", NSDI 2024; peers in ``_swing``). Like recursive doubling, but on a
1-D torus a peer is at most ``(2^(s+1) + 1)/3`` links away instead of
``2^s``, so fewer messages share a link. The steps run farthest peer first
(the paper's order reversed): then they form a butterfly, every rank adds
the same partial sums in the same tree, and every rank ends with the same
bits; in the paper's order (nearest first) ranks 0 and 1 of 8 add different
pairs, which is correct but differs in the last bit between ranks. Other
rank counts fold onto the power of two below as the authors' library does
(``_swing``): rank ``P+i`` hands its data to rank ``P+i-E`` (``N = P + E``)
and gets the result back.

Steps: ``log2 P`` (+2 on the ``2E`` folded ranks). Bytes sent per rank:
``log2(P) * M`` (+ ``M``). Cost: ``log2 N * (alpha + M*beta + M*gamma)`` for a
power of two, plus ``2 alpha + 2M beta + M gamma`` otherwise: recursive
doubling's; this closed form (``auto``'s) has no links, so it predicts no gain; on a machine
with a network :func:`pyar.model.cost.predict` charges the most loaded link.
Parameters: ``dims`` (``8x8``: the torus the ranks sit on) and ``ports`` (1 to
``2D``): the paper's multi-dimensional and multi-port Swing (``_swing``).
Limits: any ``N >= 1`` in one dimension; with ``dims``, their product.

::

    N = 8, farthest first:
    step 0 (rho(2) = 3):   0◄►3  2◄►5  4◄►7  6◄►1
    step 1 (rho(1) = -1):  0◄►7  2◄►1  4◄►3  6◄►5
    step 2 (rho(0) = 1):   0◄►1  2◄►3  4◄►5  6◄►7
"""

from ..core.schedule import Chunk, Recv, Send, split
from . import _terms, register_algorithm
from ._pof2 import around
from ._swing import fold, peer, steps, torus


@register_algorithm("swing_latency",
                    cost=lambda n, count, m, topology: _terms.fold(
                        n, m, lambda p, k: _terms.Terms(k, k * m, k * m, k)))
def swing_latency(rank, size, count, topology=None, *, dims="", ports=1):
    shape = torus(dims, size, ports)
    if size == 1 or count == 0:
        return []
    f = fold(rank, size, Chunk("data", 0, count))
    slices = [Chunk("data", lo, hi) for lo, hi in split(count, ports)]

    def exchanges():            # the farthest peer first (see the module docstring)
        for s in reversed(range(len(steps(shape)))):
            yield [op for port, part in enumerate(slices)
                   for other in (peer(f.newrank, s, shape, port),)
                   for op in (Send(other, part), Recv(other, part, reduce=True))]
    return around(f, exchanges)
