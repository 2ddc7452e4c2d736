"""Deliberately broken allreduces for the tests of ``pyar verify``, each modelled on a bug
seen in real collective libraries and each wrong under one condition only (the ring of
``correct.py`` otherwise)."""

import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from correct import finish, private, ring, ring_blocks, widen  # noqa: E402

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
