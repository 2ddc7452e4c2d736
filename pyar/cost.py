"""The alpha-beta-gamma cost of a schedule, computed from the schedule itself.

Parameters (:class:`Params`): a message of ``b`` bytes takes ``alpha + b*beta``
seconds on the wire; folding ``b`` received bytes into a chunk takes
``b*gamma`` more (gamma per dtype); a rank pays ``delta`` of software
overhead each time it posts a step, unless the schedule's buffer is at most
``resident`` bytes (the MPI executor then runs it on a Resident, whose
steps cost what a bare message does, and which passes messages within a
node through shared memory: no rendezvous either, see below).

The model is a discrete-event timeline over the steps of all ranks:

- A rank posts step ``i`` ``delta`` after step ``i-1`` ended (step 0 at ``delta``).
- Messages match as in the simulator: the k-th send from ``src`` to ``dst``
  meets the k-th receive ``dst`` posts from ``src`` (FIFO per ordered pair).
  A message is ready once both ends have posted it (sends rendezvous).
- Every rank has one send port and one receive port (full duplex: a rank
  sends and receives at once, as in an exchange). A message occupies the
  sender's send port and the receiver's receive port for ``alpha + b*beta``,
  starting when it is ready and both ports are free; ports serve messages in
  the order they became ready. So naive's root receives its ``N-1`` messages
  one after another.
- A step ends when its last message has been delivered, plus ``b*gamma`` for
  each receive that folds (the folds run one after another at the end of the
  step, as the executors do them).

The time of the schedule is when its last rank ends. :func:`predict` also
splits that time along the critical path into its alpha, beta, gamma and
delta terms.

MPI libraries send a message up to an *eager* limit at once and a larger one
after a rendezvous (a handshake with the receiver): ``Params.eager`` bytes and
``Params.rendezvous`` seconds. Above ``resident`` bytes of buffer, the
messages of the critical path pay the rendezvous each when they average more
than the limit (exact for algorithms whose messages are all of one size; for
halving ones an approximation),
on top of the timeline and the formulas below. For the classic algorithms this gives the Thakur-Rabenseifner-
Gropp formulas (M bytes, N ranks, a power of two, M divisible by N), plus
``delta`` per step on the critical path (above ``resident`` bytes):

===================  ============================================================
ring                 ``2(N-1) alpha + 2(N-1)/N M beta + (N-1)/N M gamma``
recursive_doubling   ``log2 N (alpha + M beta + M gamma)``
rabenseifner         ``2 log2 N alpha + 2(N-1)/N M beta + (N-1)/N M gamma``
binomial             ``2 ceil(log2 N) (alpha + M beta) + ceil(log2 N) M gamma``
naive                ``2(N-1)(alpha + M beta) + (N-1) M gamma``
===================  ============================================================

For a rank count ``N = pof2 + rem`` that is not a power of two, MPICH's fold
(recursive doubling, Rabenseifner) adds two steps on the critical path:
``2 alpha + 2 M beta + M gamma`` on top of the formula for ``pof2``.

:func:`formula` gives closed forms for every built-in builder of every
collective (what the ``auto`` tuner uses, since building a 1,024-rank ring
schedule takes tens of seconds); :func:`predict` costs any schedule, a
user's included. Beyond the table (``L = ceil(log2 N)``, ``M`` the
collective's buffer, allgather's the gathered total): ring reduce-scatter,
pairwise reduce-scatter ``(N-1)(alpha + M/N (beta + gamma))``; ring
allgather ``(N-1)(alpha + M/N beta)``; binomial reduce and bcast ``L(alpha +
M beta)`` (+ ``L M gamma``); bruck ``L`` steps, ``(N-1)/N M`` bytes, a
second message in each round that passes two or more blocks; scatter_allgather
a binomial scatter ``L alpha + (N-1)/N M beta`` then the ring allgather;
reduce_scatter_gather the recursive-halving reduce-scatter then that
gather; pairwise alltoall ``N-1`` rounds (``N`` for odd N) of ``M/N``;
linear alltoall one step whose critical path alternates between send and
receive ports: ``2N-3`` messages of ``M/N``; dissemination ``L alpha``;
segmented_ring ring's bytes in ``G`` times ring's messages; hierarchical
its three rings on the topology's nodes (see ``_hierarchical``). All are
exact (equal to :func:`predict`, :data:`EXACT`) except double_binary_tree's,
an estimate of an irregular pipeline (see ``_double_binary_tree``).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import NamedTuple

import numpy as np

from .algorithms import (binomial, bruck, builder, dissemination, double_binary_tree,
                         hierarchical, linear, naive, pairwise, rabenseifner, recursive_doubling,
                         recursive_halving, reduce_scatter_gather, ring, scatter_allgather,
                         segmented_ring)
from .errors import ScheduleError
from .schedule import SEGMENT, Schedule, Send, build, pieces


class Params(NamedTuple):
    """Machine parameters, in seconds: per message, per byte sent, per byte folded (by dtype
    name), per step posted; the largest message sent eagerly (bytes) and what a larger
    one's rendezvous adds; the largest buffer (bytes) whose steps cost no ``delta``."""

    alpha: float
    beta: float
    gamma: dict
    delta: float = 0.0
    eager: float = math.inf
    rendezvous: float = 0.0
    resident: float = 0.0

    def gamma_of(self, dtype) -> float:
        """Seconds per byte folded for ``dtype``; for a dtype not measured, the slowest one's."""
        found = self.gamma.get(np.dtype(dtype).name)
        return max(self.gamma.values()) if found is None else found


class Terms(NamedTuple):
    """A time as counts along its critical path: messages, bytes sent, bytes folded, steps."""

    messages: float
    bytes: float
    folded: float
    steps: float


class Prediction(NamedTuple):
    """The predicted time and its parts, in seconds."""

    time: float
    alpha: float
    beta: float
    gamma: float
    delta: float
    terms: Terms
    rendezvous: float = 0.0

    @classmethod
    def of(cls, terms: Terms, params: Params, gamma: float, nbytes: float) -> Prediction:
        """The time of ``terms`` for a schedule whose buffer is ``nbytes``."""
        resident = nbytes <= params.resident
        parts = (terms.messages * params.alpha, terms.bytes * params.beta,
                 terms.folded * gamma, 0.0 if resident else terms.steps * params.delta)
        late = not resident and terms.bytes > params.eager * terms.messages  # no messages: never
        rendezvous = terms.messages * params.rendezvous if late else 0.0
        return cls(sum(parts) + rendezvous, *parts, terms, rendezvous)


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _ceil_log2(n: int) -> int:
    return (n - 1).bit_length()


def _fold(size: int, nbytes: float, middle) -> Terms:
    """``middle(pof2, log2 pof2)`` plus MPICH's fold of the ranks beyond the power of two."""
    pof2 = 1 << _log2(size)
    t = middle(pof2, _log2(pof2))
    if size == pof2:
        return t
    return Terms(t.messages + 2, t.bytes + 2 * nbytes, t.folded + nbytes, t.steps + 2)


def _folded_doubling(n: int, count: int, m: float, reduce: bool) -> Terms:
    """Recursive halving (``reduce``) or doubling over the blocks of ``n`` ranks, MPICH's fold.

    Participant 0 stands for ranks 0 and 1, so its range always holds the
    most (and the largest) blocks and it is the last to start: the critical
    path is its fold (``M`` in, folded if ``reduce``), its ``log2 pof2``
    exchanges (each as long as the range it keeps or has gathered: ``2^k``
    participants, ``min(rem, 2^k)`` of them two blocks) and the handover of
    block 0 (reduce-scatter) or of everything (allgather) to rank 0. Exact
    for any count.
    """
    pof2 = 1 << _log2(n)
    rem, k = n - pof2, _log2(n)
    q, r = divmod(count, n)
    per = m / count

    def upto(i):        # bytes of blocks [0, i)
        return (i * q + min(i, r)) * per

    ranges = sum(upto((1 << i) + min(rem, 1 << i)) for i in range(k))
    if not rem:
        return Terms(k, ranges, ranges if reduce else 0, k)
    first, last = (m, upto(1)) if reduce else (upto(1), m)
    return Terms(k + 2, first + ranges + last, m + ranges if reduce else 0, k + 2)


def _ring(n: int, m: float, phases: int, folds: int) -> Terms:
    """``phases`` ring passes of ``N-1`` steps over ``N`` blocks, ``folds`` of them reducing."""
    return Terms(phases * (n - 1), phases * (n - 1) / n * m, folds * (n - 1) / n * m,
                 phases * (n - 1))


def _add(*parts: Terms) -> Terms:
    return Terms(*map(sum, zip(*parts)))


def _segmented_ring(n: int, count: int, m: float, topology) -> Terms:
    """Ring's bytes in ``G`` times its messages, one segment per step."""
    g = pieces(-(-count // n), SEGMENT)
    t = _ring(n, m, 2, 1)
    return Terms(g * t.messages, t.bytes, t.folded, g * t.steps)


def _hierarchical(n: int, count: int, m: float, topology) -> Terms:
    """Leaders' ring reduce-scatter, the ring allreduce across nodes, the ring allgather.

    With ``L`` leaders per node, ``K`` nodes and up to ``E`` ranks beyond
    the leaders per leader, the critical path starts at a leader that folds
    its ``E`` extras' buffers in (one after another on its receive port),
    runs the three rings in step with every other leader, and ends handing
    the result to its extras: exact for any node sizes.
    """
    nodes = topology.nodes if topology is not None else (range(n),)
    leaders = min(map(len, nodes))
    extras = -(-max(map(len, nodes)) // leaders) - 1
    ends = Terms(2 * extras, 2 * extras * m, extras * m, 2 if extras else 0)
    return _add(ends, _ring(leaders, m, 1, 1), _ring(len(nodes), m / leaders, 2, 1),
                _ring(leaders, m, 1, 0))


_DBT_PER_SEGMENT = {2: 2, 3: 4, 4: 5}    # steady-state messages per step; 7 for N >= 5


def _double_binary_tree(n: int, count: int, m: float, topology) -> Terms:
    """An estimate, not exact: the pipeline's critical path under the port model is irregular.

    Exact: ``G + H + D - 1`` steps on it, every message one segment of
    ``m = M/2G`` bytes. Estimated from :func:`predict` of the schedules
    (N <= 64, G <= 32; tests keep the time within a third of it): the first
    segment crosses ``2(H+D-1)`` messages and folds ``H+D-1``; each further
    one adds about 7 messages (a rank's 4 sends and 4 receives per step only
    partly overlap; 2, 4, 5 for N = 2, 3, 4) and 2 folds.
    """
    g = pieces(count - count // 2, SEGMENT)
    _, _, height, depth = double_binary_tree.tree(n)
    fill = height[0] + max(depth) - 1
    messages = 2 * fill + _DBT_PER_SEGMENT.get(n, 7) * (g - 1)
    segment = m / (2 * g)
    return Terms(messages, messages * segment, (fill + 2 * (g - 1)) * segment, g + fill)


def _linear_alltoall(n: int, count: int, m: float, topology) -> Terms:
    """All ``2(N-1)`` messages of a rank are ready at once; a message waits for its sender's
    and its receiver's ports, so the path alternates between them: ``2N-3`` blocks long."""
    return Terms(2 * n - 3, (2 * n - 3) / n * m, 0, 1)


def _bruck(n: int, count: int, m: float, topology) -> Terms:
    """``ceil(log2 N)`` rounds; a round that passes two or more blocks wraps round the end
    of the buffer on some rank, which then sends it as two messages."""
    rounds = [min(d, n - d) for d in (1 << i for i in range(_ceil_log2(n)))]
    return Terms(sum(1 if b == 1 else 2 for b in rounds), (n - 1) / n * m, 0, len(rounds))


def _pairwise_alltoall(n: int, count: int, m: float, topology) -> Terms:
    """``N-1`` rounds for even N; for odd N, ``N`` rounds with one rank idle in each, and the
    critical path runs through all of them."""
    rounds = n - 1 if n % 2 == 0 else n
    return Terms(rounds, rounds / n * m, 0, rounds)


def _binomial_tree(n: int, m: float, fold: bool) -> Terms:
    k = _ceil_log2(n)
    return Terms(k, k * m, k * m if fold else 0, k)


def _gather(n: int, count: int, m: float) -> Terms:
    """Binomial gather (or scatter) of blocks: the root's ``ceil(log2 N)`` messages carry
    every block but its own (block 0, the largest), one after another, and no other path
    is longer."""
    k = _ceil_log2(n)
    return Terms(k, m - -(-count // n) * m / count, 0, k)


_FORMULAS = {     # built-in builder -> (size, count, M bytes, topology) -> Terms; tests check
    ring.ring: lambda n, count, m, topology: _ring(n, m, 2, 1),
    recursive_doubling.recursive_doubling: lambda n, count, m, topology: _fold(
        n, m, lambda p, k: Terms(k, k * m, k * m, k)),
    rabenseifner.rabenseifner: lambda n, count, m, topology: _fold(
        n, m, lambda p, k: Terms(2 * k, 2 * (p - 1) / p * m, (p - 1) / p * m, 2 * k)),
    binomial.binomial: lambda n, count, m, topology: _add(_binomial_tree(n, m, True),
                                                          _binomial_tree(n, m, False)),
    naive.naive: lambda n, count, m, topology: Terms(2 * (n - 1), 2 * (n - 1) * m,
                                                     (n - 1) * m, 2),
    segmented_ring.segmented_ring: _segmented_ring,
    hierarchical.hierarchical: _hierarchical,
    double_binary_tree.double_binary_tree: _double_binary_tree,
    # reduce_scatter
    ring.ring_reduce_scatter: lambda n, count, m, topology: _ring(n, m, 1, 1),
    pairwise.pairwise_reduce_scatter: lambda n, count, m, topology: _ring(n, m, 1, 1),
    recursive_halving.recursive_halving: lambda n, count, m, topology: _folded_doubling(
        n, count, m, True),
    # allgather (M: the gathered total)
    ring.ring_allgather: lambda n, count, m, topology: _ring(n, m, 1, 0),
    recursive_doubling.recursive_doubling_allgather: lambda n, count, m, topology:
        _folded_doubling(n, count, m, False),
    bruck.bruck: _bruck,
    # reduce, bcast
    binomial.binomial_reduce: lambda n, count, m, topology: _binomial_tree(n, m, True),
    reduce_scatter_gather.reduce_scatter_gather: lambda n, count, m, topology: _add(
        _folded_doubling(n, count, m, True), _gather(n, count, m)),
    binomial.binomial_bcast: lambda n, count, m, topology: _binomial_tree(n, m, False),
    scatter_allgather.scatter_allgather: lambda n, count, m, topology: _add(
        _gather(n, count, m), _ring(n, m, 1, 0)),
    # alltoall, barrier
    linear.linear: _linear_alltoall,
    pairwise.pairwise_alltoall: _pairwise_alltoall,
    dissemination.dissemination: lambda n, count, m, topology: Terms(
        _ceil_log2(n), 0, 0, _ceil_log2(n)),
}

EXACT = frozenset(_FORMULAS) - {double_binary_tree.double_binary_tree}
"""The builders whose closed forms equal :func:`predict` (for counts divisible by the blocks)."""

TOPOLOGICAL = frozenset({hierarchical.hierarchical})
"""The builders that use the topology: without one (or on one node) they are a plain ring."""


def formula(collective: str, algorithm: str, size: int, count: int, dtype,
            topology=None) -> Terms | None:
    """The closed-form terms of a built-in algorithm for ``size`` ranks and ``count`` elements.

    None when ``algorithm`` has no closed form (a user's, or a built-in name
    registered again). For the builders in :data:`EXACT`, equal to
    :func:`predict` for counts divisible by the number of blocks and
    otherwise within one element per message of it; ``double_binary_tree``'s
    is an estimate (see ``_double_binary_tree``). With fewer elements than
    ranks the schedules leave out empty messages, which the closed forms
    still count.
    """
    closed = _FORMULAS.get(builder(algorithm, collective))
    if closed is None:
        return None
    if size == 1 or (count == 0 and collective != "barrier"):
        return Terms(0, 0, 0, 0)
    return closed(size, count, count * np.dtype(dtype).itemsize, topology)


def estimate(collective: str, algorithm: str, size: int, count: int, dtype, params: Params,
             *, exact: bool = False, topology=None) -> tuple[Prediction, str]:
    """The predicted time of ``algorithm`` and where it came from: ``"formula"`` or ``"schedule"``.

    Uses the closed form when there is one (unless ``exact``), else builds
    the schedule (on ``topology``) and runs :func:`predict` on it.
    """
    dtype = np.dtype(dtype)
    terms = None if exact else formula(collective, algorithm, size, count, dtype, topology)
    if terms is not None:
        return Prediction.of(terms, params, params.gamma_of(dtype), count * dtype.itemsize), \
            "formula"
    schedule = build(collective, algorithm, size, count, builder(algorithm, collective),
                     topology)
    return predict(schedule, params, dtype), "schedule"


_ZERO = (0.0, 0, 0, 0, 0)     # (seconds, messages, bytes, folded bytes, steps) on a path


def predict(schedule: Schedule, params: Params, dtype="float32") -> Prediction:
    """The modelled time of ``schedule`` on ``dtype`` elements (see the module docstring).

    Raises ScheduleError if the schedule's messages do not match (size, or a
    deadlock): the simulator says which rank and step in more detail.
    """
    itemsize = np.dtype(dtype).itemsize
    gamma = params.gamma_of(dtype)
    steps = [schedule.steps(r) for r in range(schedule.size)]
    nbytes = schedule.count * itemsize
    delta = 0.0 if nbytes <= params.resident else params.delta
    finish = _timeline(steps, itemsize, params.alpha, params.beta, gamma, delta)
    _, messages, sent, folded, nsteps = max(finish, default=_ZERO)
    return Prediction.of(Terms(messages, sent, folded, nsteps), params, gamma, nbytes)


def _timeline(steps, itemsize, alpha, beta, gamma, delta):
    """When each rank ends, as a path tuple ``(seconds, messages, bytes, folded, steps)``.

    Event-driven. A rank's ports only ever carry its current step's messages,
    so a message alone on both its ports (the sender's only send of the
    step, the receiver's only receive) starts as soon as it is ready; the
    others wait in a heap and take the ports in the order they became ready.
    Each path tuple carries the counts along the path that set its time, so
    the critical path's terms come out with the time. (Written for speed: a
    1,024-rank ring is two million messages.)
    """
    size = len(steps)
    current = [0] * size
    outstanding = [0] * size        # messages of the current step not yet delivered
    ends = [_ZERO] * size           # per rank: its current step's latest delivery so far
    folds = [0] * size              # per rank: bytes its current step folds
    done = [None] * size            # per rank: when its last step ended
    send_free = [_ZERO] * size      # when each rank's send port is free
    recv_free = [_ZERO] * size      # when each rank's receive port is free
    unmatched = {}                  # 2*channel + is_send -> deque of (path, nbytes, fold, alone)
    now = []                        # ready messages alone on their ports
    ready = []                      # heap of (seconds, seq, path, src, dst, nbytes, fold)
    seq = 0
    push = heapq.heappush

    def post(rank, at):
        """Post the rank's next step at ``delta`` after ``at``, when its previous step ended."""
        nonlocal seq
        mine = steps[rank]
        while current[rank] < len(mine):
            at = (at[0] + delta, at[1], at[2], at[3], at[4] + 1)
            step = mine[current[rank]]
            ops = step.ops
            ends[rank], folds[rank], outstanding[rank] = at, 0, len(ops)
            one_send, one_recv = len(step.sends) == 1, len(step.recvs) == 1
            for op in ops:
                peer, (_, lo, hi) = op[0], op[1]
                nbytes = (hi - lo) * itemsize
                if type(op) is Send:
                    is_send, src, dst, fold, alone = True, rank, peer, False, one_send
                else:
                    is_send, src, dst, fold, alone = False, peer, rank, op[2], one_recv
                channel = 2 * (src * size + dst)            # + 1 for its sends, + 0 receives
                waiting = unmatched.get(channel + (not is_send))
                if not waiting:
                    unmatched.setdefault(channel + is_send, deque()).append(
                        (at, nbytes, fold, alone))
                    continue
                their_at, their_bytes, their_fold, their_alone = waiting.popleft()
                if their_bytes != nbytes:
                    sent, expected = (nbytes, their_bytes) if is_send else (their_bytes, nbytes)
                    raise ScheduleError(
                        f"size mismatch: rank {src} sends rank {dst} {sent} bytes, which it "
                        f"receives as {expected} (rank {rank} step {current[rank]})")
                both = at if at[0] >= their_at[0] else their_at
                if alone and their_alone:
                    now.append((both, src, dst, nbytes, fold or their_fold))
                else:
                    push(ready, (both[0], seq, both, src, dst, nbytes, fold or their_fold))
                    seq += 1
            if ops:
                return
            current[rank] += 1          # an empty step costs only its overhead
        done[rank] = at

    def deliver(rank, end, nbytes, fold):
        e = ends[rank]
        if end[0] >= e[0]:
            ends[rank] = e = end
        if fold:
            folds[rank] += nbytes
        outstanding[rank] -= 1
        if not outstanding[rank]:
            f = folds[rank]
            current[rank] += 1
            post(rank, (e[0] + f * gamma, e[1], e[2], e[3] + f, e[4]))

    # Messages alone on their ports go first: those they lead to are ready no earlier than
    # they are, so the heap still hands the shared ports out in time order.
    pop = heapq.heappop
    for rank in range(size):
        post(rank, _ZERO)
    while now or ready:
        if now:
            at, src, dst, nbytes, fold = now.pop()
        else:
            _, _, at, src, dst, nbytes, fold = pop(ready)
            free = send_free[src]
            if free[0] > at[0]:
                at = free
            free = recv_free[dst]
            if free[0] > at[0]:
                at = free
        end = (at[0] + alpha + nbytes * beta, at[1] + 1, at[2] + nbytes, at[3], at[4])
        send_free[src] = recv_free[dst] = end
        deliver(src, end, nbytes, False)
        deliver(dst, end, nbytes, fold)
    for rank in range(size):
        if done[rank] is None:
            raise ScheduleError(f"deadlock or unmatched message: rank {rank} never finishes "
                                f"its step {current[rank]} (pyar.simulate says where)")
    return done
