"""Collective checks against the MPI library's own collectives."""

import zlib

import numpy as np
from mpi4py import MPI

from pyar.library import wraps
from pyar.ops import Op, is_float
from pyar.verify import describe, library_reference, mismatches


def agree(comm, ok, message=""):
    """Assert on every rank at once: fails everywhere if it fails anywhere."""
    flag = np.array([bool(ok)], np.int32)
    comm.Allreduce(MPI.IN_PLACE, flag, MPI.MIN)
    if not flag[0]:
        raise AssertionError(f"rank {comm.rank}: {message}" if not ok else
                             f"rank {comm.rank}: fine here, failed on another rank")


def library_may_differ(algorithm, op, dtype):
    """The MPI library's own max/min need not give every rank the same bits: MPICH 5.0.2
    returns -0.0 on one rank and +0.0 on another for max(-0.0, +0.0). pyar's algorithms
    must; ``mpi`` is only held to the numbers."""
    return algorithm == "mpi" and Op(op) in (Op.MAX, Op.MIN) and is_float(dtype)


def check_against_mpi(comm, result, x, op, what="", identical=True, library=False):
    """``result`` equals MPI_Allreduce of ``x`` within tolerance and, if ``identical``, bitwise
    on every rank (half types: MPI_Allreduce on ``x`` widened to float32; integers the library
    saturates: numpy's, unless ``library``, the library's own result checked; where it
    saturates, not at all: a saturating sum depends on the order it is taken in, which two
    of the library's calls need not share: Open MPI 5.0.11's int8 sum at 5 ranks gave 76 in
    one and 38 in the other)."""
    op = Op(op)
    if library and not wraps(np.asarray(x).dtype, op.reduction):
        return          # (alike on every rank: the dtype and op are)
    expected, scale = library_reference(comm, x, op, library)
    bad = mismatches(result, expected, op, comm.size, scale)
    # one allreduce for both verdicts: the numbers everywhere, and the same bits (their crc32
    # the same on every rank: its least value is minus the least of its negation)
    digest = zlib.crc32(np.ascontiguousarray(result).tobytes()) if identical else 0
    votes = np.array([bad.size == 0, digest, -digest], np.int64)
    comm.Allreduce(MPI.IN_PLACE, votes, MPI.MIN)
    if not votes[0]:
        raise AssertionError(f"rank {comm.rank}: {what}: {describe(result, expected, bad)}"
                             if bad.size else f"rank {comm.rank}: fine here, failed on another "
                             f"rank")
    if votes[1] != -votes[2]:
        raise AssertionError(f"rank {comm.rank}: {what}: result differs bitwise between ranks "
                             f"(crc32 here {digest:#010x})")
