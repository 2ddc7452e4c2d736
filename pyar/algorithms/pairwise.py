"""Pairwise exchange: N-1 rounds in which every rank trades one block with one peer.

Reduce-scatter: in round k rank r sends its (unreduced) block ``r+k`` to rank
``r+k`` and folds rank ``r-k``'s contribution to block r into its own.
All-to-all: the rounds are a 1-factorization of the ranks (the circle
method): in each round the ranks pair up and swap the blocks meant for each
other, in place; for odd N one rank sits each round out.

Reduce-scatter: ``N-1`` steps, ``(N-1)/N * M`` bytes sent per rank,
``(N-1)*alpha + (N-1)/N*M*(beta + gamma)``. All-to-all: ``N-1`` steps (``N``
for odd N), ``(N-1)/N * M`` bytes sent, ``(N-1)*alpha + (N-1)/N*M*beta``;
one peer at a time, so no link is oversubscribed: for long messages.
Limits: any ``N >= 1``.

::

    all-to-all, N = 4:   round 0: 0◄►3 1◄►2   round 1: 0◄►1 2◄►3   round 2: 0◄►2 1◄►3
"""

from ..core.schedule import Chunk, Recv, Send, compact, split
from . import _terms, register_algorithm


@register_algorithm("pairwise", collective="reduce_scatter", auto=True,
                    cost=lambda n, count, m, topology: _terms.ring(n, m, 1, 1))
def pairwise_reduce_scatter(rank, size, count, topology=None):
    blocks = [Chunk("data", lo, hi) for lo, hi in split(count, size)]
    return compact([Send((rank + k) % size, blocks[(rank + k) % size]),
                    Recv((rank - k) % size, blocks[rank], reduce=True)]
                   for k in range(1, size))


def partner(rank, size, round_):
    """``rank``'s peer in ``round_`` of the circle-method 1-factorization; itself when idle."""
    ring = size - 1 if size % 2 == 0 else size    # odd, so 2i = round has one solution
    if rank == ring:                                 # the extra rank of an even size
        return (round_ * (ring + 1) // 2) % ring
    peer = (round_ - rank) % ring
    return ring if peer == rank and ring < size else peer


def _alltoall_cost(n, count, m, topology):
    """``N-1`` rounds for even N; for odd N, ``N`` rounds with one rank idle in each, and the
    critical path runs through all of them."""
    rounds = n - 1 if n % 2 == 0 else n
    return _terms.Terms(rounds, rounds / n * m, 0, rounds)


@register_algorithm("pairwise", collective="alltoall", auto=True, cost=_alltoall_cost)
def pairwise_alltoall(rank, size, count, topology=None):
    blocks = [Chunk("data", lo, hi) for lo, hi in split(count, size)]
    rounds = size - 1 if size % 2 == 0 else size
    steps = []
    for k in range(rounds):
        peer = partner(rank, size, k)
        if peer != rank:
            steps.append([Send(peer, blocks[peer]), Recv(peer, blocks[peer])])
    return compact(steps)
