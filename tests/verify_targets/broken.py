"""Deliberately broken allreduces for the tests of ``pyar verify``, each modelled on a bug
seen in real collective libraries and each wrong under one condition only (the ring of
``correct.py`` otherwise)."""

import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from correct import FOLD, as_bytes, finish, private, ring, ring_blocks, widen  # noqa: E402

SEGMENT = 1 << 14       # elements: 64 KiB of float32


def segment_tail(x, comm, op="sum", out=None):
    """Pipelined in segments of 16 Ki elements, but the last partial segment loses its final
    element (an off-by-one in the remainder): wrong only above the segment size."""
    data = widen(x)
    with np.errstate(all="ignore"):
        for lo in range(0, data.size, SEGMENT):
            hi = min(lo + SEGMENT, data.size)
            if data.size > SEGMENT and hi == data.size and hi - lo < SEGMENT:
                hi -= 1
            ring_blocks(data[lo:hi], private(comm), op)
        return finish(x, data, op, comm.Get_size(), out)


def reshape_inplace(x, comm, op="sum", out=None):
    """Writes the result through ``out.reshape(-1)``, which is a copy, not a view, when
    ``out`` is not contiguous: in place on a strided or transposed x does nothing."""
    data = widen(x)
    with np.errstate(all="ignore"):
        ring_blocks(data, private(comm), op)
        result = finish(x, data, op, comm.Get_size(), None)
    if out is None:
        return result
    out.reshape(-1)[...] = result.reshape(-1)
    return out


def half_wire(x, comm, op="sum", out=None):
    """Sends float32 as float16 on the wire to halve the traffic (a compression left on):
    float32 sums come back with float16's precision."""
    if x.dtype != np.float32 or op not in ("sum", "avg"):
        return ring(x, comm, op, out)
    data = np.array(x, copy=True).reshape(-1).astype(np.float16)
    with np.errstate(all="ignore"):
        ring_blocks(data, private(comm), op)
        return finish(x, data.astype(np.float32), op, comm.Get_size(), out)


_STATE = MPI.Comm.Create_keyval()


def stale(x, comm, op="sum", out=None):
    """Keeps a sum accumulator per (count, dtype) on the communicator and assumes it starts
    at zero: right on the first call of a size, wrong on every later one."""
    if op != "sum":
        return ring(x, comm, op, out)
    state = comm.Get_attr(_STATE)
    if state is None:
        state = {}
        comm.Set_attr(_STATE, state)
    acc = state.setdefault((x.size, x.dtype.str), np.zeros_like(widen(x)))
    with np.errstate(all="ignore"):
        acc += np.asarray(x).reshape(-1)
        ring_blocks(acc, private(comm), op)
        return finish(x, acc.copy(), op, comm.Get_size(), out)


def shared_tag(x, comm, op="sum", out=None):
    """Runs the ring on the caller's communicator with tag 0 instead of a private one: takes
    the caller's own messages when they are in flight."""
    data = widen(x)
    with np.errstate(all="ignore"):
        ring_blocks(data, comm, op, tag=0)
        return finish(x, data, op, comm.Get_size(), out)


def via_float64(x, comm, op="sum", out=None):
    """Reduces integers as float64 (one kernel for everything): wrong once an integer needs
    more than 53 bits, or a sum must wrap."""
    if x.dtype.kind not in "iu":
        return ring(x, comm, op, out)
    data = np.array(x, copy=True).reshape(-1).astype(np.float64)
    with np.errstate(all="ignore"):
        ring_blocks(data, private(comm), op)
        result = data.astype(x.dtype)
    return finish(x, result, op, comm.Get_size(), out)


def fmax(x, comm, op="sum", out=None):
    """max/min with np.fmax/np.fmin, which skip NaN: wrong only where a NaN meets a number."""
    fold = {"max": np.fmax, "min": np.fmin}.get(op)
    data = widen(x)
    with np.errstate(all="ignore"):
        ring_blocks(data, private(comm), op, fold=fold)
        return finish(x, data, op, comm.Get_size(), out)


def scratch_in_x(x, comm, op="sum", out=None):
    """With ``out=`` given, reduces in x and copies to out: x is overwritten, though the call
    was not in place."""
    if out is None or out is x or not x.flags.c_contiguous:
        return ring(x, comm, op, out)
    flat = x.reshape(-1)
    with np.errstate(all="ignore"):
        ring_blocks(flat, private(comm), op)
        return finish(x, flat.copy(), op, comm.Get_size(), out)


def half_accumulate(x, comm, op="sum", out=None):
    """Folds float16 and bfloat16 in their own type (every partial sum rounded to it, the
    average summed before the division): inf where a partial sum overflows though the exact
    sum or average is finite; right for every other dtype."""
    data = np.array(x, copy=True).reshape(-1)
    with np.errstate(all="ignore"):
        ring_blocks(data, private(comm), op)
        return finish(x, data, op, comm.Get_size(), out)


def hang_empty(x, comm, op="sum", out=None):
    """Rank 0 returns at once for an empty x while the others wait for it: a hang, at count
    0 on two ranks or more."""
    c = private(comm)
    if x.size == 0 and c.Get_rank() != 0:
        c.Barrier()
    return ring(x, comm, op, out)


def deadlock_at_3(x, comm, op="sum", out=None):
    """On 3 ranks every rank first waits for a message from its left neighbour, which is
    waiting too: every call deadlocks there; the ring on any other number of ranks."""
    if comm.Get_size() == 3:
        c = private(comm)
        c.Recv(np.empty(1), source=(c.Get_rank() - 1) % 3, tag=5)
    return ring(x, comm, op, out)


def reused_send(x, comm, op="sum", out=None):
    """A ring whose blocks above 16 Ki elements go out from one staging buffer, refilled for
    the next step before the previous step's Isend is waited for: right where the library
    copies a send at once (eager: small messages), wrong where it sends by rendezvous from
    the buffer once the receiver is ready (large messages, a receiver late)."""
    c = private(comm)
    size, rank = c.Get_size(), c.Get_rank()
    data = widen(x)
    if size == 1 or data.size // size <= SEGMENT:
        return ring(x, comm, op, out)
    edges = [data.size * b // size for b in range(size + 1)]
    block = lambda b: data[edges[b % size]:edges[b % size + 1]]     # noqa: E731
    staging = np.empty(data.size // size + 1, data.dtype)
    right, left = (rank + 1) % size, (rank - 1) % size
    pending = None
    with np.errstate(all="ignore"):
        for phase in ("reduce", "gather"):
            for s in range(size - 1):
                send = block(rank - s) if phase == "reduce" else block(rank + 1 - s)
                into = block(rank - s - 1) if phase == "reduce" else block(rank - s)
                staging[:send.size] = send          # the bug: the last Isend may still read it
                if pending is not None:
                    pending.Wait()
                pending = c.Isend(as_bytes(staging[:send.size]), right, 3)
                incoming = np.empty_like(into)
                c.Recv(as_bytes(incoming), left, 3)
                into[...] = FOLD[op](into, incoming) if phase == "reduce" else incoming
        pending.Wait()
        return finish(x, data, op, size, out)


_UNWAITED = []


def unwaited_send(x, comm, op="sum", out=None):
    """Sends x itself to every other rank and returns without waiting for those sends above
    16 Ki elements (it waits for them at its next call): the caller reusing x at once
    changes what the others receive. Below, and for a library that copies each send at
    once, right: every rank folds every x in rank order."""
    c = private(comm)
    size, rank = c.Get_size(), c.Get_rank()
    while _UNWAITED:
        _UNWAITED.pop().Wait()
    mine = np.ascontiguousarray(x).reshape(-1)
    if size == 1 or mine.size <= SEGMENT or not np.shares_memory(mine, x):
        return ring(x, comm, op, out)
    sends = [c.Isend(as_bytes(mine), (rank + k) % size, 4) for k in range(1, size)]
    parts = [None] * size
    parts[rank] = mine
    for k in range(1, size):
        parts[(rank - k) % size] = np.empty_like(mine)
        c.Recv(as_bytes(parts[(rank - k) % size]), (rank - k) % size, 4)
    _UNWAITED.extend(sends)
    data = widen(parts[0])
    with np.errstate(all="ignore"):
        for part in parts[1:]:
            data = FOLD[op](data, widen(part))
        return finish(x, data, op, size, out)
