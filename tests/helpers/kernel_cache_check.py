"""Run under mpiexec with NUMBA_CACHE_DIR set (tests/unit/test_kernel_cache.py does): every rank
compiles or loads the host kernels at the same moment, each in its own order of dtypes, checks
every result, loads the mailbox program runner too, and rank 0 prints how often the kernels were
compiled (cache misses) and loaded (cache hits) over all ranks."""

import sys

import numpy as np
from mpi4py import MPI

from pyar import kernels
from pyar.kernels import host, mailbox

DTYPES = [np.dtype(t) for t in ("int32", "float32", kernels.BFLOAT16)]
UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def main():
    comm = MPI.COMM_WORLD
    comm.Barrier()                                  # start together: the worst case
    failures = []
    shift = comm.rank % len(DTYPES)
    for dtype in DTYPES[shift:] + DTYPES[:shift]:
        a = (np.arange(1, 101) % 7 + 1 + comm.rank).astype(dtype)
        b = (np.arange(1, 101) % 5 + 2).astype(dtype)
        for op in kernels.OPS:
            wide = np.float32 if dtype in kernels.HALF else dtype
            expected = UFUNCS[op](a.astype(wide), b.astype(wide)).astype(dtype)
            got = a.copy()
            kernels.reduce_into(got, b, op)
            if got.tobytes() != expected.tobytes():
                failures.append(f"rank {comm.rank}: {dtype} {op} wrong")
    mailbox.runner()
    compiled = (*host.KERNELS, mailbox.run)
    counts = np.array([sum(sum(k.stats.cache_misses.values()) for k in compiled),
                       sum(sum(k.stats.cache_hits.values()) for k in compiled)])
    comm.Allreduce(MPI.IN_PLACE, counts, MPI.SUM)
    failures = [f for fs in comm.allgather(failures) for f in fs]
    if comm.rank == 0:
        print(f"compiled {counts[0]} loaded {counts[1]}")
        print("\n".join(failures) or "every result right")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
