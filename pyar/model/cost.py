"""The alpha-beta-gamma cost of a schedule, computed from the schedule itself.

Parameters (:class:`Params`): a message of ``b`` bytes takes ``alpha + b*beta``
seconds on the wire; folding ``b`` received bytes into a chunk takes
``b*gamma`` more (gamma per dtype); a rank pays ``delta`` of software
overhead each time it posts a step, unless the schedule's buffer is at most
``resident`` bytes (the runtime then runs it on a Resident, whose
steps cost what a bare message does, and which passes messages within a
node through shared memory: no rendezvous either, see below).

The model is a discrete-event timeline over the steps of all ranks:

- A rank posts step ``i`` ``delta`` after step ``i-1`` ended (step 0 at ``delta``).
- Messages match as in the simulator: the k-th send from ``src`` to ``dst``
  meets the k-th receive ``dst`` posts from ``src`` (FIFO per ordered pair).
  A message is ready once both ends have posted it (sends rendezvous).
- Every rank has ``ports`` send ports and as many receive ports (full duplex:
  a rank sends and receives at once, as in an exchange; ``Params.ports``,
  default 1). A message occupies a send port of the sender and a receive port
  of the receiver, those that free first, for ``alpha + b*beta``, starting when
  it is ready and both are free; ports serve messages in the order they became
  ready. So on one port naive's root receives its ``N-1`` messages one after
  another; on ``k`` (a multi-port NIC, a torus router's ``2D`` links) ``k`` at
  a time.
- A step ends when its last message has been delivered, plus ``b*gamma`` for
  each receive that folds (the folds run one after another at the end of the
  step, as the runtime does them).
- A message from a rank to itself (a local copy or fold) takes no wire time and
  no port: its fold is charged ``b*gamma`` as any other; a local copy is free.

**Memory terms.** ``beta`` and ``gamma`` are what a byte costs while it
stays in cache: ``pyar tune`` measures beta on MPI's exchanges of 1 - 4 MiB
and gamma on 256 KiB arrays. A large plan within a node moves its bytes
through the node's memory, which its ranks share, on the runtime's own path
(:mod:`pyar.runtime.programs`: mailboxes or reads from the sender's
memory). ``Params.memory`` holds what a byte sent, a byte folded and a step
cost there: ``pyar tune`` times two ranks of a node exchanging half of a
buffer of 1, 4, 16 and 64 MiB at once, in place, copied, folded, and copied
in 16 steps. For a schedule on one node whose buffer is above ``resident``
bytes, a message costs ``alpha + b*beta_m``, a fold ``b*max(gamma,
gamma_m)`` and a step ``delta_m``, those of the buffer's size (in log size
between the measured ones; :meth:`Params.rates`). The prediction's
``memory`` part is what ``beta_m`` and ``gamma_m`` add over the in-cache
terms (``delta_m`` is in its ``delta``). Limits: the rows are measured with
two ranks of a node streaming at once, so a step where fewer ranks of the
node move bytes (a tree's root alone) is overestimated, and more ranks per
node share the memory more than the rows say; schedules over several nodes
get no memory terms (the network decides there).

The time of the schedule is when its last rank ends. :func:`predict` also
splits that time along the critical path into its alpha, beta, gamma,
delta and memory terms, and with ``trace=True`` keeps the path itself, event
by event (:func:`critical_path`: what ``pyar model --explain`` prints). On a machine
with two link classes (``Params.alpha_inter``, ``beta_inter``) and a
topology, a message between nodes costs ``alpha_inter + b*beta_inter``.

**Networks.** With a network (``Params.network``, a
:class:`pyar.model.network.Network`: a machine file's ``network`` entry), every
message is routed over its links, and the model charges congestion with a
max-congestion bound: the messages of one step (each counted in its sender's
step) share the links they cross, each link full duplex (its two directions
apart) and no adaptive routing (one fixed route per pair). A message of ``b``
bytes of step ``s`` then takes ``alpha + sum of its route's link latencies``
(hops x latency on uniform links) for its alpha part and, for its beta part,
the larger of ``b*beta`` (its rank's port) and ``max over the links l of its
route of B(s, l) / bw(l)``, where ``B(s, l)`` is all the bytes that step ``s``'s
messages put on link ``l``. For a step every rank takes at once (ring,
recursive doubling, Swing) its time is so the most loaded link's bytes over
its bandwidth plus the hops' latency: a bound that assumes the link shared
fairly for the whole step, not packet-level contention, and no overlap of one
step's traffic with another's on a link.

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

from .. import collectives
from ..algorithms import algorithm as registered, builder
from ..algorithms._terms import Terms
from ..core.errors import ScheduleError
from ..core.schedule import Schedule, build

# The runtime's regimes, which the model charges apart: a plan whose buffer is at most this
# many bytes runs on a Resident (its messages in shared-memory mailboxes or persistent
# requests, no per-step overhead ``delta``: :mod:`pyar.runtime.programs`).
RESIDENT_BYTES = 1 << 19


class Params(NamedTuple):
    """Machine parameters, in seconds: per message, per byte sent, per byte folded (by dtype
    name), per step posted; the largest message sent eagerly (bytes) and what a larger
    one's rendezvous adds; the largest buffer (bytes) whose steps cost no ``delta``.
    ``alpha_inter`` and ``beta_inter``: per message and per byte between ranks on
    different nodes of a topology (None: as within a node). ``network``: the links every
    message is routed over (see the module docstring; None: ports only). ``ports``: the
    messages a rank sends, and receives, at once, each at ``beta``. ``memory``: the memory
    terms (see the module docstring), rows ``(buffer bytes, beta, gamma, delta)`` in
    increasing size, as ``pyar tune`` measures them (empty: none)."""

    alpha: float
    beta: float
    gamma: dict
    delta: float = 0.0
    eager: float = math.inf
    rendezvous: float = 0.0
    resident: float = 0.0
    alpha_inter: float | None = None
    beta_inter: float | None = None
    network: object = None      # a pyar.model.network.Network, or None (no links modelled)
    ports: int = 1
    memory: tuple = ()          # ((buffer bytes, beta, gamma, delta), ...) on one node

    def gamma_of(self, dtype) -> float:
        """Seconds per byte folded for ``dtype``; for a dtype not measured, the slowest one's."""
        found = self.gamma.get(np.dtype(dtype).name)
        return max(self.gamma.values()) if found is None else found

    def rates(self, nbytes: float, gamma: float, local: bool = True
              ) -> tuple[float, float, float]:
        """Seconds per byte sent, per byte folded and per step posted for a buffer of
        ``nbytes`` (``gamma``: the dtype's in cache), on one node if ``local``: at most
        ``resident`` bytes, ``beta``, ``gamma`` and no step overhead; above, the memory
        rows' on one node (in log size between two rows, the nearest row's outside them; a
        fold costs the larger of the dtype's and the row's), else ``beta``, ``gamma`` and
        ``delta``."""
        rows = self.memory
        if nbytes <= self.resident:
            return self.beta, gamma, 0.0
        if not rows or not local:
            return self.beta, gamma, self.delta
        if nbytes <= rows[0][0] or len(rows) == 1:
            _, beta, folded, step = rows[0]
        elif nbytes >= rows[-1][0]:
            _, beta, folded, step = rows[-1]
        else:
            k = next(i for i in range(1, len(rows)) if nbytes <= rows[i][0])
            w = math.log(nbytes / rows[k - 1][0]) / math.log(rows[k][0] / rows[k - 1][0])
            beta, folded, step = (a + w * (b - a) for a, b in zip(rows[k - 1][1:], rows[k][1:]))
        return beta, max(gamma, folded), step

    @property
    def links(self) -> bool:
        """Whether messages between nodes cost other than those within one."""
        return ((self.alpha_inter is not None and self.alpha_inter != self.alpha)
                or (self.beta_inter is not None and self.beta_inter != self.beta))

    def inter(self) -> tuple[float, float]:
        """``(alpha, beta)`` between nodes."""
        return (self.alpha if self.alpha_inter is None else self.alpha_inter,
                self.beta if self.beta_inter is None else self.beta_inter)


class Prediction(NamedTuple):
    """The predicted time and its parts, in seconds."""

    time: float
    alpha: float
    beta: float
    gamma: float
    delta: float
    terms: Terms
    rendezvous: float = 0.0
    memory: float = 0.0

    @classmethod
    def of(cls, terms: Terms, params: Params, gamma: float, nbytes: float,
           local: bool = True) -> Prediction:
        """The time of ``terms`` for a schedule whose buffer is ``nbytes``; ``local``: on one
        node (then with the memory terms)."""
        beta, folding, delta = params.rates(nbytes, gamma, local)
        parts = (terms.messages * params.alpha, terms.bytes * params.beta,
                 terms.folded * gamma, terms.steps * delta)
        late = nbytes > params.resident and terms.bytes > params.eager * terms.messages
        rendezvous = terms.messages * params.rendezvous if late else 0.0   # (none: no messages)
        memory = terms.bytes * (beta - params.beta) + terms.folded * (folding - gamma)
        return cls(sum(parts) + rendezvous + memory, *parts, terms, rendezvous, memory)

    @classmethod
    def of_path(cls, path, params: Params, nbytes: float, gamma: float,
                local: bool) -> Prediction:
        """The time of a timeline path (:func:`_timeline`), whose alpha and beta seconds it
        carries (they differ by link with two link classes), charged ``gamma`` per byte folded
        in cache and the memory terms if ``local`` (see :func:`predict`)."""
        _, messages, sent, folded, nsteps, alpha, beta, _ = path
        terms = Terms(messages, sent, folded, nsteps)
        plain = cls.of(terms, params, gamma, nbytes, local)     # its delta, rendezvous, memory
        sending = sent * (params.rates(nbytes, gamma, local)[0] - params.beta)
        folds = path[0] - alpha - beta - plain.delta - (plain.memory - sending)
        return cls(path[0] + plain.rendezvous, alpha, beta - sending, folds, plain.delta, terms,
                   plain.rendezvous, plain.memory)


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

    Uses the closed form when there is one (unless ``exact``, or ``params``
    has two link classes and ``topology`` several nodes, or a network, or more than
    one port: closed forms count messages on one port, not links), else builds the
    schedule (on ``topology``) and runs :func:`predict` on it.
    """
    dtype = np.dtype(dtype)
    exact = exact or params.network is not None or params.ports > 1 or (
        params.links and topology is not None and len(topology.nodes) > 1)
    terms = None if exact else formula(collective, algorithm, size, count, dtype, topology)
    if terms is not None:
        local = topology is None or len(topology.nodes) == 1
        return Prediction.of(terms, params, params.gamma_of(dtype), count * dtype.itemsize,
                             local), "formula"
    schedule = build(collective, algorithm, size, count, builder(algorithm, collective),
                     topology)
    return predict(schedule, params, dtype), "schedule"


_ZERO = (0.0, 0, 0, 0, 0, 0.0, 0.0, None)
# a path: (seconds, messages, bytes, folded bytes, steps, alpha seconds, beta seconds, trace)


def predict(schedule: Schedule, params: Params, dtype="float32", *, trace: bool = False
            ) -> Prediction:
    """The modelled time of ``schedule`` on ``dtype`` elements (see the module docstring).

    With a topology and ``params.links``, a message between nodes costs
    ``alpha_inter + b*beta_inter``. With ``params.network``, each message is routed and
    charged for the congestion of its step (see the module docstring). With ``trace``,
    the prediction's critical path is kept for :func:`critical_path`. Raises ScheduleError
    if the schedule's messages do not match (size, or a deadlock): the
    simulator says which rank and step in more detail.
    """
    itemsize = np.dtype(dtype).itemsize
    gamma = params.gamma_of(dtype)
    nbytes = schedule.count * itemsize
    node_of = schedule.topology.node_of if schedule.topology and params.links else None
    local = params.network is None and (schedule.topology is None
                                        or len(schedule.topology.nodes) == 1)
    beta, folding, delta = params.rates(nbytes, gamma, local)
    table = schedule.table()
    net = None
    if params.network is not None:
        traffic = params.network.table_traffic(table, itemsize)
        latency, congestion = np.zeros(table.rank.size), np.zeros(table.rank.size)
        latency[table.send], congestion[table.send] = traffic.latency, traffic.congestion
        net = (latency.tolist(), congestion.tolist())
    finish = _timeline(table, itemsize, params._replace(beta=beta), folding, delta, node_of,
                       trace, net)
    last = max(finish, default=_ZERO, key=lambda path: path[0])
    prediction = Prediction.of_path(last, params, nbytes, gamma, local)
    if trace:
        _traces[id(prediction)] = (prediction, last[7])
    return prediction


_traces: dict = {}      # id(prediction) -> (prediction, its path's trace), for critical_path


def critical_path(prediction: Prediction) -> list[tuple]:
    """The events along the critical path of a ``predict(..., trace=True)``, in time order:
    ``(end seconds, what, rank, step, peer, bytes, seconds it adds, term, why)`` with
    ``what`` one of ``"post"`` (term delta), ``"message"`` (alpha, then beta, two
    entries) and ``"fold"`` (gamma)."""
    found = _traces.get(id(prediction))
    if found is None or found[0] is not prediction:
        raise ValueError("critical_path needs a prediction made with predict(..., trace=True)")
    events, node = [], found[1]
    while node is not None:
        node, event = node
        events.append(event)
    return events[::-1]


def _timeline(table, itemsize, params, gamma, delta, node_of=None, trace=False, net=None):
    """When each rank ends, as a path (see ``_ZERO``) of the schedule in ``table``.

    ``net``: per row, the route's latency and the congestion seconds of a send row
    (two lists), or None.

    Event-driven. A rank's ports only ever carry its current step's messages,
    so a message with a port of its own at both ends (the sender's step sends,
    and the receiver's step receives, no more messages than there are ports)
    starts as soon as it is ready; the others wait in a heap and take the
    ports, the one that frees first, in the order they became ready.
    Each path carries the counts along the path that set its time, so the
    critical path's terms come out with the time (and with ``trace``, its
    events). Per message a few tuple operations: a 1,024-rank ring is two
    million messages.
    """
    size = len(table.nsteps)
    alpha, beta = params.alpha, params.beta
    far_alpha, far_beta = params.inter()
    nsteps = table.nsteps.tolist()
    first = np.concatenate(([0], np.cumsum(table.nsteps)[:-1]))
    bounds = np.searchsorted(first[table.rank] + table.step,
                             np.arange(int(table.nsteps.sum()) + 1)).tolist()
    step_first = first.tolist()
    send_col, peer_col = table.send.tolist(), table.peer.tolist()
    nbytes_col = ((table.hi - table.lo) * itemsize).tolist()
    fold_col = table.reduce.tolist()
    sends_in = np.add.reduceat(table.send.astype(np.int64), bounds[:-1]).tolist() \
        if table.rank.size else []
    current = [0] * size
    outstanding = [0] * size        # messages of the current step not yet delivered
    ends = [_ZERO] * size           # per rank: its current step's latest delivery so far
    folds = [0] * size              # per rank: bytes its current step folds
    done = [None] * size            # per rank: when its last step ended
    ports = params.ports
    send_free = [[_ZERO] * ports for _ in range(size)]  # when each send port of a rank frees
    recv_free = [[_ZERO] * ports for _ in range(size)]  # and each receive port
    unmatched = {}          # 2*channel + is_send -> deque of (path, nbytes, fold, alone, row)
    now = []                        # ready messages alone on their ports
    ready = []              # heap of (seconds, seq, path, src, dst, nbytes, fold, send row)
    seq = 0
    push = heapq.heappush

    def post(rank, at):
        """Post the rank's next step at ``delta`` after ``at``, when its previous step ended."""
        nonlocal seq
        while current[rank] < nsteps[rank]:
            i = current[rank]
            sid = step_first[rank] + i
            lo, hi = bounds[sid], bounds[sid + 1]
            why = (at[7], (at[0] + delta, "post", rank, i, -1, 0, delta, "delta",
                           "its previous step ended")) if trace else None
            at = (at[0] + delta, at[1], at[2], at[3], at[4] + 1, at[5], at[6], why)
            ends[rank], folds[rank], outstanding[rank] = at, 0, hi - lo
            n_send = sends_in[sid] if hi > lo else 0
            one_send, one_recv = n_send <= ports, hi - lo - n_send <= ports
            for row in range(lo, hi):
                peer, nbytes = peer_col[row], nbytes_col[row]
                if send_col[row]:
                    is_send, src, dst, fold, alone = True, rank, peer, False, one_send
                else:
                    is_send, src, dst, fold, alone = False, peer, rank, fold_col[row], one_recv
                channel = 2 * (src * size + dst)            # + 1 for its sends, + 0 receives
                waiting = unmatched.get(channel + (not is_send))
                if not waiting:
                    unmatched.setdefault(channel + is_send, deque()).append(
                        (at, nbytes, fold, alone, row))
                    continue
                their_at, their_bytes, their_fold, their_alone, their_row = waiting.popleft()
                if their_bytes != nbytes:
                    sent, expected = (nbytes, their_bytes) if is_send else (their_bytes, nbytes)
                    raise ScheduleError(
                        f"size mismatch: rank {src} sends rank {dst} {sent} bytes, which it "
                        f"receives as {expected} (rank {rank} step {i})")
                both = at if at[0] >= their_at[0] else their_at
                sender = row if is_send else their_row
                if alone and their_alone:
                    now.append((both, src, dst, nbytes, fold or their_fold, sender))
                else:
                    push(ready, (both[0], seq, both, src, dst, nbytes, fold or their_fold,
                                 sender))
                    seq += 1
            if hi > lo:
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
            i = current[rank]
            current[rank] += 1
            why = e[7]
            if trace and f:
                why = (why, (e[0] + f * gamma, "fold", rank, i, -1, f, f * gamma, "gamma",
                             "the step's folds run after its last message"))
            post(rank, (e[0] + f * gamma, e[1], e[2], e[3] + f, e[4], e[5], e[6], why))

    # Messages alone on their ports go first: those they lead to are ready no earlier than
    # they are, so the heap still hands the shared ports out in time order.
    pop = heapq.heappop

    def first_free(free):
        """The port of ``free`` (a rank's send or receive ports) that frees first."""
        return 0 if ports == 1 else min(range(ports), key=lambda k: free[k][0])
    for rank in range(size):
        post(rank, _ZERO)
    while now or ready:
        reason = "ready: both ends posted it"
        if now:
            at, src, dst, nbytes, fold, row = now.pop()
            out = into = 0              # (its own ports: which one is not tracked)
        else:
            _, _, at, src, dst, nbytes, fold, row = pop(ready)
            out, into = first_free(send_free[src]), first_free(recv_free[dst])
            free = send_free[src][out]
            if free[0] > at[0]:
                at, reason = free, f"waits for rank {src}'s send port"
            free = recv_free[dst][into]
            if free[0] > at[0]:
                at, reason = free, f"waits for rank {dst}'s receive port"
        if src == dst:              # a local copy or fold: no wire, no port
            deliver(src, at, nbytes, False)
            deliver(dst, at, nbytes, fold)
            continue
        if node_of is not None and node_of[src] != node_of[dst]:
            a, b = far_alpha, nbytes * far_beta
        else:
            a, b = alpha, nbytes * beta
        if net is not None:
            a += net[0][row]
            b = max(b, net[1][row])
        why = None
        if trace:
            why = (at[7], (at[0] + a, "message", src, current[src], dst, nbytes, a, "alpha",
                           reason))
            why = (why, (at[0] + a + b, "message", src, current[src], dst, nbytes, b, "beta",
                         f"{nbytes} B on the link"))
        end = (at[0] + a + b, at[1] + 1, at[2] + nbytes, at[3], at[4], at[5] + a, at[6] + b, why)
        send_free[src][out] = recv_free[dst][into] = end
        deliver(src, end, nbytes, False)
        deliver(dst, end, nbytes, fold)
    for rank in range(size):
        if done[rank] is None:
            raise ScheduleError(f"deadlock or unmatched message: rank {rank} never finishes "
                                f"its step {current[rank]} (pyar.simulate says where)")
    return done
