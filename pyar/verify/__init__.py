"""What a correct result is: references and tolerances, reusable by tests and by users; and
``pyar verify``, the oracle for any allreduce, reduce_scatter or allgather (:func:`check`; a
reproducer script calls :func:`pyar.verify.worker.reproduce`).

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

from ..collectives.allreduce import ALLREDUCE
from ..collectives.reference import magnitude, reference  # noqa: F401  (part of this API)
from ..core.ops import HALF, Op, is_float, resolve
from ..runtime.baseline import library_call
from ..runtime.library import wraps
from .cases import sample  # noqa: F401  (part of this API)
from .driver import check  # noqa: F401  (pyar verify from Python)


def library_reference(comm, x, op, library=False):
    """MPI_Allreduce of ``x`` on mpi4py communicator ``comm`` (the oracle), and the scale its
    rounding error is relative to (as :func:`magnitude` gives it). Collective.

    Where the library's integer arithmetic does not wrap around (and pyar's does:
    :func:`pyar.runtime.library.wraps`), the expected values are numpy's, unless ``library``
    (checking the library's own collective, ``algorithm="mpi"``).

    MPI has no float16 or bfloat16: for those the oracle is MPI_Allreduce of
    ``x`` widened to float32 (exactly), and the expected values stay float32.
    """
    op = resolve(op)
    x = np.ascontiguousarray(x)
    if x.dtype in HALF:
        x = x.astype(np.float32)
    expected = np.empty_like(x)
    library_call(ALLREDUCE, comm, x, expected, op.reduction)()
    if not (library or wraps(x.dtype, op.reduction)):     # it saturates: numpy's instead
        expected = reference(comm.allgather(x), Op.SUM if op is Op.AVG else op).astype(x.dtype)
    contribution = np.abs(x.astype(np.float64))
    scale = np.empty_like(contribution)
    library_call(ALLREDUCE, comm, contribution, scale, Op.PROD if op is Op.PROD else Op.SUM)()
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
