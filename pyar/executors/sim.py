"""The simulator: every rank of a schedule in one process, on numpy buffers, no MPI.

It delivers each message with the step semantics of :mod:`pyar.schedule`, as
an MPI run would: a step completes once every peer it exchanges with has
posted the matching transfer (sends rendezvous, so a schedule that only works
with eager buffering is a deadlock here too). It measures traffic, and it
raises :class:`pyar.ScheduleError` naming rank, step and peer for an
unmatched or mis-sized message, for a deadlock, and for a read of scratch
that nothing was received into yet (its contents are undefined on MPI).
"""

from __future__ import annotations

import contextlib
import gc
from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from .. import collectives, ops
from ..errors import ScheduleError
from ..kernels import reduce_into
from ..schedule import Schedule, Send


@dataclass
class RankStats:
    """What one rank did: bytes and messages sent, bytes received, steps taken.

    With a topology, ``bytes_sent_inter_node`` counts the bytes sent to ranks
    on other nodes (``bytes_sent_intra_node`` the rest); without one, 0.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    messages: int = 0
    steps: int = 0
    bytes_sent_inter_node: int = 0

    @property
    def bytes_sent_intra_node(self) -> int:
        return self.bytes_sent - self.bytes_sent_inter_node


@dataclass
class SimResult:
    outputs: list      # per-rank results, as the collective returns them (None where it does)
    stats: list        # per-rank RankStats


def simulate(schedule: Schedule, inputs=None, *, op="sum") -> SimResult:
    """Run ``schedule`` for all its ranks at once; ``inputs[r]`` is what rank r passes.

    ``inputs[r]`` is the ``x`` rank r would pass to the collective (see
    :mod:`pyar.collectives`): ``schedule.count`` elements, or ``count / size``
    for allgather; all of one dtype; not modified. A barrier takes none.
    """
    op = ops.resolve(op)
    record = collectives.collective(schedule.collective)
    size, count = schedule.size, schedule.count
    if record.count(1, size) == 0:          # a barrier: no input
        inputs = [np.zeros(0, np.uint8)] * size if inputs is None else inputs
    if inputs is None or len(inputs) != size:
        raise ValueError(f"need one input per rank: {size}, got "
                         f"{'none' if inputs is None else len(inputs)}")
    arrays = [np.asarray(x) for x in inputs]
    dtype = ops.check_dtype(arrays[0].dtype)
    if record.reduces:
        ops.check(op, dtype)
    expected = record.x_size(count, size)
    for r, a in enumerate(arrays):
        if a.dtype != dtype or record.count(a.size, size) != count:
            raise ValueError(f"input of rank {r} must have {expected} elements of {dtype} "
                             f"(a {record.name} of count {count}), got {a.size} of {a.dtype}")
        record.check(a.shape, size)
    with _collector_paused():
        steps = [schedule.steps(r) for r in range(size)]
        buffers = [{"data": record.load(a, r, size),
                    "scratch": np.zeros(schedule.scratch_count(r), dtype),
                    "written": np.zeros(schedule.scratch_count(r), bool)}
                   for r, a in enumerate(arrays)]
        stats = [RankStats(steps=len(s)) for s in steps]
        node_of = schedule.topology.node_of if schedule.topology else None
        _run(steps, buffers, stats, op.reduction, node_of)
    outputs = []
    for r, (a, b) in enumerate(zip(arrays, buffers)):
        out = record.result(b["data"], a.shape, r, size, schedule.root)
        if out is not None and record.reduces:
            ops.finalize(out, op, size)
        outputs.append(out)
    return SimResult(outputs, stats)


@contextlib.contextmanager
def _collector_paused():
    """Pause Python's cyclic GC: its full passes over millions of fresh step tuples
    (none of them cyclic) would otherwise double the time of a large simulation."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _run(steps, buffers, stats, reduction, node_of):
    """Advance ranks step by step until all finish; a stall is a deadlock or an unmatched message.

    Messages from one rank to another form a channel matched in FIFO order.
    When a rank begins a step it posts the step's transfers, numbering each on
    its channel, and snapshots what it sends; the step completes once the
    peer has posted the matching transfer of every one of them. (Written for
    speed: a 1,024-rank ring is two million rank-steps.)
    """
    size = len(steps)
    current = [0] * size
    posted = [None] * size          # per rank: (waits, receives) of its current step
    sent = defaultdict(int)         # channel (src * size + dst) -> sends posted on it
    received = defaultdict(int)     # channel -> receives posted on it
    mail = defaultdict(deque)       # channel -> [(payload, sender step)] not yet received

    def begin(rank):
        i = current[rank]
        if i == len(steps[rank]):
            posted[rank] = None
            return
        bufs, st = buffers[rank], stats[rank]
        waits, recvs = [], []
        for op in steps[rank][i].ops:
            c = op.chunk
            if type(op) is Send:
                channel = rank * size + op.peer
                if c.buffer == "scratch" and not bufs["written"][c.lo:c.hi].all():
                    raise ScheduleError(
                        f"rank {rank} step {i} sends scratch [{c.lo}, {c.hi}) to peer "
                        f"{op.peer} before all of it was received into")
                payload = bufs[c.buffer][c.lo:c.hi].copy()
                mail[channel].append((payload, i))
                st.bytes_sent += payload.nbytes
                st.messages += 1
                if node_of is not None and node_of[rank] != node_of[op.peer]:
                    st.bytes_sent_inter_node += payload.nbytes
                n = sent[channel]
                sent[channel] = n + 1
                waits.append((received, channel, n))
            else:
                channel = op.peer * size + rank
                n = received[channel]
                received[channel] = n + 1
                waits.append((sent, channel, n))
                written = bufs["written"] if c.buffer == "scratch" else None
                recvs.append((channel, bufs[c.buffer], c.lo, c.hi, op.reduce, op.peer, written))
        posted[rank] = waits, recvs

    def complete(rank):
        i = current[rank]
        st = stats[rank]
        for channel, buf, lo, hi, reduce, peer, written in posted[rank][1]:
            payload, sender_step = mail[channel].popleft()
            if payload.size != hi - lo:
                raise ScheduleError(
                    f"size mismatch: rank {rank} step {i} receives {hi - lo} elements from "
                    f"peer {peer}, which sends {payload.size} at its step {sender_step}")
            st.bytes_received += payload.nbytes
            if written is not None:
                if reduce and not written[lo:hi].all():
                    raise ScheduleError(
                        f"rank {rank} step {i} folds into scratch [{lo}, {hi}) from peer {peer} "
                        f"before all of it was received into")
                written[lo:hi] = True
            if reduce:
                reduce_into(buf[lo:hi], payload, reduction)
            else:
                buf[lo:hi] = payload
        current[rank] = i + 1
        begin(rank)

    for rank in range(size):
        begin(rank)
    queue, queued = deque(range(size)), [True] * size
    while queue:
        rank = queue.popleft()
        queued[rank] = False
        mine = posted[rank]
        if mine is None or any(counter[channel] <= n for counter, channel, n in mine[0]):
            continue
        complete(rank)
        wake = [rank]
        if posted[rank] is not None:
            wake += [op.peer for op in steps[rank][current[rank]].ops]
        for r in wake:
            if not queued[r]:
                queued[r] = True
                queue.append(r)
    for rank in range(size):
        if posted[rank] is not None:
            raise ScheduleError(_stall(rank, current, steps, posted[rank][0], sent, size))


def _stall(rank, current, steps, waits, sent, size):
    """Why ``rank`` cannot complete its current step."""
    counter, channel, n = next(w for w in waits if w[0][w[1]] <= w[2])
    is_send = counter is not sent
    peer = channel % size if is_send else channel // size
    i, j = current[rank], current[peer]
    if j == len(steps[peer]):
        if is_send:
            return (f"unmatched send: rank {rank} step {i} sends to peer {peer}, "
                    f"which has finished without receiving it")
        return (f"unmatched receive: rank {rank} step {i} receives from peer {peer}, "
                f"which has finished without sending it")
    return (f"deadlock: rank {rank} is stuck at step {i} waiting for peer {peer}, "
            f"itself stuck at step {j}")
