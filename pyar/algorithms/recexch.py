"""Recursive exchange (MPICH's recexch): recursive doubling with radix ``k``.

MPICH's ``MPIR_Allreduce_intra_recexch``, with its neighbours
(``MPII_Recexchalgo_get_neighbors``). With ``p`` the largest power of ``k``
at most ``N`` (``k`` lowered to ``N`` when ``2 < N < k``, as MPICH does) and
``rem = N - p`` extra ranks:

- step 1: the first ``T = rem*k // (k-1)`` ranks form sets of ``k``
  consecutive ranks, whose first ``k-1`` are extra and send their data to
  the set's last rank, which folds it in (a partial last set sends to rank
  ``T``). The ``p`` others are the participants, numbered ``0..p-1``.
- step 2: ``log_k p`` phases. In phase ``j`` the participants whose numbers
  differ only in base-``k`` digit ``j`` form a group of ``k``; each sends its
  whole vector to the ``k-1`` others and folds theirs in. After the last
  phase every participant holds the result.
- step 3: each participant sends the result to the extra ranks of step 1.

``k = 2`` is recursive doubling's exchange pattern (its fold of the extra
ranks is MPICH's recexch's, not recursive_doubling's pairing).

Fold order: every member of a group computes the group's value in one order,
digit order ``((v0 op v1) op v2) ... op v(k-1)``, so every rank ends with
the same bits. A rank that folds received data into its own can only build
sums that start from its own value; pyar's ops are commutative bit for bit,
so that suffices for digits 0 and 1 (``v1 op v0`` is ``v0 op v1``): they fold
the others' vectors into their data as they arrive, in one step. A rank of
digit ``d >= 2`` receives ``v0`` into its data, its own vector (a message to
itself) and the others' into scratch in the exchange step, and folds them
into its data in digit order in a local step of messages to itself. (MPICH
folds its own vector first for integer types, and in neighbour order only
for floating-point ones in recent versions.)

Steps: an extra rank 2; a participant ``log_k p`` exchanges, plus a local
step in each phase where its digit is at least 2, plus one step each for
steps 1 and 3 if it has extra ranks. Bytes sent: ``M`` by an extra rank;
``(k-1) M`` a phase by a participant, plus ``M`` per extra rank it serves.
Folded: ``(k-1) M`` a phase (and ``M`` per extra rank). Local copies: ``M``
(its own vector) a phase where the digit is at least 2. Scratch: ``(k-1) M``.

Cost: the model sends a phase's ``k-1`` messages through one send port
and one receive port per rank, matched in the order the ranks post them:
the last member of a group to post waits for the others' receive ports, so a
phase's critical path is ``2k-3`` messages. For ``N = p`` the closed form
is exactly the model's path: ``L = log_k N`` phases,
``L(2k-3)(alpha + M beta) + L(k-1) M gamma`` over ``L`` steps (``k = 2``)
or ``2L`` (``k >= 3``: the local step). Otherwise (``exact=False``) it adds
``2e (alpha + M beta) + e M gamma`` and 2 steps for the ``e = min(k-1, rem)``
extra ranks a participant serves, an estimate within 0.8-1.5 of the model's
time. Against recursive doubling's ``log2 k (alpha + M beta + M gamma)`` and
``log2 k`` steps for the same progress it costs more messages and saves
steps only for ``k > 4`` (``2 log_k p`` against ``log2 p``), so the model predicts no win over
recursive_doubling or rabenseifner on the machines of ``machines/``: not an
``auto`` candidate.
Limits: any ``N >= 1``, any ``k >= 2``.

::

    N = 9, k = 3: the groups of a phase, each member sending to the other two
    phase 0:  0 1 2 │ 3 4 5 │ 6 7 8         (digit 0 of the participant number)
    phase 1:  0 3 6 │ 1 4 7 │ 2 5 8         (digit 1)

    N = 12, k = 3 (p = 9, rem = 3, T = 4): step 1  0, 1 ─► 2  3 ─► 4;  step 3 the reverse
"""

from ..core.schedule import Chunk, Recv, Send, compact
from . import register_algorithm
from ._terms import Terms
from .knomial import radix


class Layout:
    """MPICH's recexch neighbours for ``size`` ranks and radix ``k`` (``k`` lowered to ``size``
    when ``2 < size < k``): the participants, the extra ranks and where they send."""

    def __init__(self, size, k):
        if size < k:
            k = max(size, 2)
        p, phases = 1, 0
        while p * k <= size:
            p, phases = p * k, phases + 1
        self.k, self.p, self.phases = k, p, phases
        self.rem = size - p
        self.T = self.rem * k // (k - 1)

    def newrank(self, rank):
        """The rank's number among the ``p`` participants; -1 for an extra rank."""
        if rank >= self.T:
            return rank - self.rem
        return rank // self.k if rank % self.k == self.k - 1 else -1

    def real(self, newrank):
        """The communicator rank of participant ``newrank``."""
        full = self.rem // (self.k - 1)
        return newrank * self.k + self.k - 1 if newrank < full else newrank + self.rem

    def partner(self, rank):
        """The participant an extra rank sends its data to."""
        return min(rank + self.k - 1 - rank % self.k, self.T)

    def extras(self, rank):
        """The extra ranks a participant serves, nearest first (as MPICH lists them)."""
        if rank < self.T:
            return list(range(rank - 1, rank - self.k, -1))
        if rank == self.T and self.T % self.k:
            return list(range(self.T - 1, self.T - 1 - self.T % self.k, -1))
        return []


def _cost(n, count, m, topology, *, k=4):
    """``log_k p`` phases of ``2k-3`` messages (the model's path, exact for ``N = p``), plus
    step 1's and step 3's messages of the ``min(k-1, rem)`` extra ranks a participant serves."""
    layout = Layout(n, k)
    k, phases = layout.k, layout.phases
    each = 2 * k - 3
    core = Terms(phases * each, phases * each * m, phases * (k - 1) * m,
                 phases * (1 if k == 2 else 2))
    e = min(k - 1, layout.rem)
    return Terms(core.messages + 2 * e, core.bytes + 2 * e * m, core.folded + e * m,
                 core.steps + 2 * (e > 0))


@register_algorithm("recexch", cost=_cost, exact=False)
def recexch(rank, size, count, topology=None, *, k=4):
    radix(k)
    if size == 1 or count == 0:
        return []
    layout = Layout(size, k)
    data = Chunk("data", 0, count)
    me = layout.newrank(rank)
    if me < 0:                                      # an extra rank
        partner = layout.partner(rank)
        return compact([[Send(partner, data)], [Recv(partner, data)]])
    extras = layout.extras(rank)
    gather = [Recv(e, data, reduce=True) for e in extras]          # step 1
    exchanges = []                                                 # step 2
    span = 1
    for _ in range(layout.phases):
        exchanges += phase(rank, me, span, layout, count)
        span *= layout.k
    scatter = [Send(e, data) for e in extras]                      # step 3
    return compact([gather, *exchanges, scatter])


def phase(rank, me, span, layout, count):
    """The steps of one exchange phase (group stride ``span``) of participant ``me``: its group's
    vectors folded into data in digit order."""
    k = layout.k
    digit = me // span % k
    group = [rank if i == digit else layout.real(me + (i - digit) * span) for i in range(k)]
    data = Chunk("data", 0, count)
    sends = [Send(peer, data) for i, peer in enumerate(group) if i != digit]
    if digit < 2:               # fold straight into data: v1 op v0 is v0 op v1
        return [sends + [Recv(peer, data, reduce=True)
                         for i, peer in enumerate(group) if i != digit]]
    slot = [Chunk("scratch", (i - 1) * count, i * count) for i in range(k)]
    exchange = [*sends, Send(rank, data), Recv(group[0], data),
                *(Recv(peer, slot[i]) for i, peer in enumerate(group) if i)]
    fold = [op for i in range(1, k) for op in (Send(rank, slot[i]), Recv(rank, data, reduce=True))]
    return [exchange, fold]

