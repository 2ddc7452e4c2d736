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

:func:`formula` gives an algorithm's closed form, registered with its
builder (``register_algorithm(..., cost=...)``; each built-in's is in its
module, whose docstring states it): what the ``auto`` tuner uses, since
building a 1,024-rank ring schedule takes tens of seconds. :func:`predict`
costs any schedule, a user's included, and :func:`estimate` falls back to it
for an algorithm without a closed form. Every built-in's closed form is exact
(equal to :func:`predict`: the record's ``exact``) except double_binary_tree's,
an estimate of an irregular pipeline.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import NamedTuple

import numpy as np

from . import collectives
from .algorithms import algorithm as registered, builder
from .algorithms._terms import Terms
from .errors import ScheduleError
from .schedule import Schedule, Send, build


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


def formula(collective: str, algorithm: str, size: int, count: int, dtype,
            topology=None) -> Terms | None:
    """The closed-form terms of ``algorithm`` for ``size`` ranks and ``count`` elements.

    None when it was registered without a closed form (a user's, or a
    built-in name registered again). An exact one (every built-in's but
    ``double_binary_tree``'s, an estimate) equals :func:`predict` for counts
    divisible by the number of blocks and is otherwise within one element
    per message of it. With fewer elements than ranks the schedules leave
    out empty messages, which the closed forms still count.
    """
    closed = registered(algorithm, collective).cost
    if closed is None:
        return None
    if size == 1 or (count == 0 and collectives.collective(collective).count(1, size)):
        return Terms(0, 0, 0, 0)        # (a collective of no data, a barrier, still costs)
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
