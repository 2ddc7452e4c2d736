"""Correct allreduces written for the tests of ``pyar verify`` (no false alarm on any).

``ring``: a ring reduce-scatter + allgather over mpi4py, on a duplicate of the caller's
communicator (so the caller's own messages are never taken), every dtype and op; float16 and
bfloat16 are accumulated in float32 (:func:`widen`) and rounded once, at the end.
``mpi_nan``: MPI_Allreduce, with max/min of floats as a user-defined op that propagates
NaN and prefers +0.0 (max) and -0.0 (min) when zeros meet, so every rank agrees; MPI has
no float16 or bfloat16, so those raise NotImplementedError (skipped by the verifier).
``exact_sum``: float sum and avg only, reproducible: every rank's x gathered and each
element's sum correctly rounded (math.fsum), whatever the ranks' order or count; an exact
zero is +0.0, a NaN the canonical one.
"""

import math

import numpy as np
from mpi4py import MPI

FOLD = {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum,
        "min": np.minimum}
_KEY = MPI.Comm.Create_keyval()


def private(comm):
    """A duplicate of ``comm``, made once (collectively) per communicator and cached on it
    (so it dies with it)."""
    mine = comm.Get_attr(_KEY)
    if mine is None:
        mine = comm.Dup()
        comm.Set_attr(_KEY, mine)
    return mine


def as_bytes(a):
    return [a.view(np.uint8), MPI.BYTE]


def widen(x):
    """A flat copy of ``x`` in its accumulation type: float32 for float16 and bfloat16
    (partial sums in the half type overflow where the exact sum is finite), else x's own."""
    wide = np.float32 if x.dtype.itemsize == 2 and x.dtype.kind in "fV" else x.dtype
    return np.array(x, dtype=wide, copy=True).reshape(-1)


def finish(x, result, op, size, out):
    """The reduced ``result`` (flat, in the accumulation type) as the call's result: divided
    by ``size`` for avg, then rounded to x's dtype and shape, into ``out`` if given."""
    if op == "avg":
        result = result / np.array(size, result.dtype)
    result = result.astype(x.dtype, copy=False).reshape(x.shape)
    if out is None:
        return result
    out[...] = result
    return out


def ring_blocks(data, comm, op, tag=0, fold=None):
    """Reduce ``data`` (1-D, contiguous, owned) in place by a ring over ``comm``."""
    fold = fold or FOLD[op]
    size, rank = comm.Get_size(), comm.Get_rank()
    if size == 1 or data.size == 0:
        return data
    edges = [data.size * b // size for b in range(size + 1)]
    block = lambda b: data[edges[b % size]:edges[b % size + 1]]
    right, left = (rank + 1) % size, (rank - 1) % size
    for s in range(size - 1):                       # reduce-scatter
        send, into = block(rank - s), block(rank - s - 1)
        incoming = np.empty_like(into)
        comm.Sendrecv(as_bytes(np.ascontiguousarray(send)), right, tag,
                      as_bytes(incoming), left, tag)
        into[...] = fold(into, incoming)
    for s in range(size - 1):                       # allgather
        send, into = block(rank + 1 - s), block(rank - s)
        incoming = np.empty_like(into)
        comm.Sendrecv(as_bytes(np.ascontiguousarray(send)), right, tag,
                      as_bytes(incoming), left, tag)
        into[...] = incoming
    return data


def ring(x, comm, op="sum", out=None):
    data = widen(x)
    with np.errstate(all="ignore"):
        ring_blocks(data, private(comm), op)
        return finish(x, data, op, comm.Get_size(), out)


def _ieee(fold, zero_tie):
    def apply(inbuf, inoutbuf, datatype):
        dtype = np.float32 if datatype == MPI.FLOAT else np.float64
        a = np.frombuffer(inbuf, dtype)
        b = np.frombuffer(inoutbuf, dtype)
        with np.errstate(invalid="ignore"):
            r = fold(a, b)
            zeros = (a == 0) & (b == 0)
            r[zeros] = zero_tie(a[zeros], b[zeros])
        b[...] = r
    return apply


_OPS = {}


def _op(op, floating):
    if not floating or op not in ("max", "min"):
        return {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX,
                "min": MPI.MIN}[op]
    if op not in _OPS:
        tie = (lambda a, b: a + b) if op == "max" else (lambda a, b: -((-a) + (-b)))
        _OPS[op] = MPI.Op.Create(_ieee(FOLD[op], tie), commute=True)
    return _OPS[op]


def mpi_nan(x, comm, op="sum", out=None):
    if x.dtype.itemsize == 2 and x.dtype.kind in "fV":
        raise NotImplementedError("MPI has no float16 or bfloat16")
    send = np.ascontiguousarray(x).reshape(-1)
    result = np.empty_like(send)
    comm.Allreduce([send, MPI.Datatype.fromcode(send.dtype.char)],
                   [result, MPI.Datatype.fromcode(send.dtype.char)],
                   _op(op, x.dtype.kind == "f"))
    return finish(x, result, op, comm.Get_size(), out)


def exact_sum(x, comm, op="sum", out=None):
    if op not in ("sum", "avg") or x.dtype.kind not in "fV":
        raise NotImplementedError("exact_sum sums and averages floats only")
    mine = np.ascontiguousarray(x, np.float64).reshape(-1)
    every = np.stack(comm.allgather(mine))
    with np.errstate(all="ignore"):
        result = every.sum(axis=0)              # (where inf or NaN is among them)
    finite = np.isfinite(every).all(axis=0)
    result[finite] = [math.fsum(column) + 0.0 for column in every[:, finite].T]
    result[np.isnan(result)] = np.nan
    return finish(x, result, op, comm.Get_size(), out)
