"""What a correct result is: references and tolerances, reusable by tests and by users; and
``pyar verify``, the oracle for any allreduce (:func:`check`, :func:`reproduce`).

``pyar verify`` lives in :mod:`.cases` (what is swept), :mod:`.judge` (the exact reference
and its error bounds), :mod:`.worker` (the MPI side: one case at a time, on a fresh
communicator) and :mod:`.driver` (the jobs under a watchdog, shrinking, the report). The
functions below are the loose checks the test suite and the bench use.

Integer, max and min results must be exact (integers wrap as in C); float
sums, averages and products may differ from the exact value by the rounding
of ``size - 1`` operations (and the division of avg): at most
``2 * size * eps`` of the result dtype times the sum of the magnitudes of the
contributions (sum, avg) or of the result (prod). For float16 and bfloat16
(eps ``2**-10``, ``2**-7``) that bound is wide; the exact checks are max, min
and every rank's bits being identical.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..library import wraps
from ..ops import HALF, Op, is_float, resolve


def reference(inputs, op) -> np.ndarray:
    """The reduction of per-rank ``inputs`` with numpy: exact dtype for integers, float64 for floats."""
    op = resolve(op)
    stack = np.stack([np.asarray(x) for x in inputs])
    if is_float(stack.dtype):
        stack = stack.astype(np.float64)
    ufunc = {Op.SUM: np.add, Op.AVG: np.add, Op.PROD: np.multiply,
             Op.MAX: np.maximum, Op.MIN: np.minimum}[op]
    result = ufunc.reduce(stack, axis=0)
    if op is Op.AVG:
        result = result / len(inputs)
    return result


def magnitude(inputs, op) -> np.ndarray:
    """Per element, the scale the rounding error is proportional to (float64)."""
    op = resolve(op)
    stack = np.abs(np.stack([np.asarray(x, dtype=np.float64) for x in inputs]))
    if op is Op.PROD:
        return np.multiply.reduce(stack, axis=0)
    total = stack.sum(axis=0)
    return total / len(inputs) if op is Op.AVG else total


def library_reference(comm, x, op, library=False):
    """MPI_Allreduce of ``x`` on mpi4py communicator ``comm`` (the oracle), and the scale its
    rounding error is relative to (as :func:`magnitude` gives it). Collective.

    Where the library's integer arithmetic does not wrap around (and pyar's does:
    :func:`pyar.library.wraps`), the expected values are numpy's, unless ``library``
    (checking the library's own collective, ``algorithm="mpi"``).

    MPI has no float16 or bfloat16: for those the oracle is MPI_Allreduce of
    ``x`` widened to float32 (exactly), and the expected values stay float32.
    """
    from ..collectives.allreduce import ALLREDUCE

    op = resolve(op)
    x = np.ascontiguousarray(x)
    if x.dtype in HALF:
        x = x.astype(np.float32)
    expected = np.empty_like(x)
    ALLREDUCE.library(comm, x, expected, op.reduction, 0)
    if not (library or wraps(x.dtype, op.reduction)):     # it saturates: numpy's instead
        expected = reference(comm.allgather(x), Op.SUM if op is Op.AVG else op).astype(x.dtype)
    contribution = np.abs(x.astype(np.float64))
    scale = np.empty_like(contribution)
    ALLREDUCE.library(comm, contribution, scale, Op.PROD if op is Op.PROD else Op.SUM, 0)
    if op is Op.AVG:
        expected /= comm.Get_size()
        scale /= comm.Get_size()
    return expected, scale


def mismatches(result, expected, op, size: int, scale=None) -> np.ndarray:
    """Flat indices where ``result`` is not ``expected`` within the tolerance of ``op``.

    ``scale`` (from :func:`magnitude`) is needed for float sum, avg and prod.
    NaN matches NaN.
    """
    op = resolve(op)
    result = np.asarray(result).reshape(-1)
    expected = np.asarray(expected).reshape(-1)
    floating = is_float(result.dtype)
    if not floating or op in (Op.MAX, Op.MIN):
        same = (result == expected.astype(result.dtype)) | (
            np.isnan(result) & np.isnan(expected) if floating else False)
        return np.flatnonzero(~same)
    eps = float(ml_dtypes.finfo(result.dtype).eps)
    r, e = result.astype(np.float64), expected.astype(np.float64)
    bound = 2 * size * eps * np.asarray(scale, dtype=np.float64).reshape(-1)
    with np.errstate(invalid="ignore"):         # inf - inf: then r == e decides
        ok = (np.abs(r - e) <= bound) | (r == e) | (np.isnan(r) & np.isnan(e))
    return np.flatnonzero(~ok)


def describe(result, expected, bad, limit: int = 3) -> str:
    """A short message naming the first mismatching elements."""
    result = np.asarray(result).reshape(-1)
    expected = np.asarray(expected).reshape(-1)
    shown = ", ".join(f"[{i}] got {result[i]!r} expected {expected[i]!r}" for i in bad[:limit])
    return f"{len(bad)} of {result.size} elements wrong: {shown}"


def sample(rank: int, count: int, dtype, op, seed: int = 0) -> np.ndarray:
    """Rank ``rank``'s test contribution: values that depend on rank, index and seed.

    A missing or doubled contribution changes the result: sums get
    ``(rank + 1) * 1000 + ...`` (never 0 for rank 0), products get factors
    away from 1 (odd integers >= 3, floats in [1 + 1/64, 1.2]), max/min get
    values spread over ranks and indices, with zeros of both signs at every
    13th element (a max or min must not depend on which rank's zero came first).
    """
    op = resolve(op)
    dtype = np.dtype(dtype)
    i = np.arange(count, dtype=np.int64)
    mix = (i * 37 + rank * 7919 + seed * 104729) % 1009
    if op is Op.PROD:
        steps = 1 + (mix % 12)
        if is_float(dtype):
            return (1 + steps / 64).astype(dtype)
        return (2 * steps + 1).astype(dtype)
    if op in (Op.MAX, Op.MIN):
        values = mix - 504
    else:
        values = (rank + 1) * 1000 + mix
    if is_float(dtype):
        values = values + (mix % 7) / 8
        if dtype == np.float16 and op not in (Op.MAX, Op.MIN):
            values = values / 64
        values = values.astype(dtype)
        if op in (Op.MAX, Op.MIN):          # signed zeros meet at every 13th element
            values[i % 13 == 0] = -0.0 if rank % 2 else 0.0
        return values
    if dtype.kind == "u" and op in (Op.MAX, Op.MIN):
        values = values + 504
    return values.astype(dtype)


def check(targets, **options):
    """``pyar verify`` from Python: verify allreduce ``targets`` (``"mod:fn"``, ``"path.py:fn"``,
    ``"pyar:ring"``, ``"mpi"``, or an importable function) in MPI jobs it starts; a
    :class:`pyar.verify.driver.Report`, true when every case ran and passed. Options, with
    the command's defaults: ``ranks``, ``profile`` (full, quick, smoke), ``dims``, ``nan``
    (propagate, mpi), ``case_timeout``, ``time_limit``, ``mpiexec``, ``load``, ``shrink``
    (see :func:`pyar.verify.driver.check`)."""
    from .driver import check as run

    return run(targets, **options)


def reproduce(target: str, case: dict, load=(), nan: str = "propagate") -> int:
    """Run one case of ``target`` on COMM_WORLD under mpiexec (what a reproducer script
    calls), float max/min judged by rule ``nan``; 1 if it fails, else 0."""
    from .worker import reproduce as run

    return run(target, case, load, nan)
