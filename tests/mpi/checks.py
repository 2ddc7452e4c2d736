"""Collective checks against the MPI library's own collectives."""

import zlib

import numpy as np
from mpi4py import MPI

import pyar
from pyar.runtime.library import wraps
from pyar.core.ops import DTYPES, Op, is_float
from pyar.verify import describe, library_reference, mismatches, sample


def agree(comm, ok, message=""):
    """Assert on every rank at once: fails everywhere if it fails anywhere."""
    flag = np.array([bool(ok)], np.int32)
    comm.Allreduce(MPI.IN_PLACE, flag, MPI.MIN)
    if not flag[0]:
        raise AssertionError(f"rank {comm.rank}: {message}" if not ok else
                             f"rank {comm.rank}: fine here, failed on another rank")


FULL_GRID_RANKS = 4     # up to this many ranks, grid tests run every dtype with every op


def dtype_op_grid(size, ops_for):
    """The (dtype, op) pairs a grid test runs at ``size`` ranks, ``ops_for(dtype)`` giving each
    dtype's ops: all of them up to :data:`FULL_GRID_RANKS`; beyond (where a call costs several
    time slices on 2 cores), each dtype once, with an op that rotates with the rank count (the
    matrix's larger runs cover different pairs), and any op that no dtype got. What a pair
    checks beyond the schedule (its kernel, its MPI datatype) does not depend on the rank
    count, and the smaller runs check every pair."""
    pairs = [(dtype, op) for dtype in DTYPES for op in ops_for(dtype)]
    if size <= FULL_GRID_RANKS:
        return pairs
    chosen = [(dtype, ops_for(dtype)[(i + size) % len(ops_for(dtype))])
              for i, dtype in enumerate(DTYPES)]
    got = {op for _, op in chosen}
    for dtype, op in pairs:
        if op not in got:
            chosen.append((dtype, op))
            got.add(op)
    return chosen


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


# collective calls by record, for the tests that run every collective and algorithm

def inputs(record, comm, count, seed):
    """x for ``record`` (a block's ``count`` elements per rank where it is blocked)."""
    shape, _ = record.shapes(comm.size, count)
    return sample(comm.rank, int(np.prod(shape)), np.float64, Op.SUM, seed).reshape(shape)


def call(record, x, algorithm, nonblocking, root):
    if record.name == "barrier":
        return (pyar.ibarrier if nonblocking else pyar.barrier)(algorithm=algorithm)
    return pyar.collective(record.name, x, root=root if record.rooted else 0,
                           algorithm=algorithm, nonblocking=nonblocking)


def same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and a.tobytes() == b.tobytes()
