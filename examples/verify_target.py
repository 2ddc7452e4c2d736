# mpiexec -n 2 python -m mpi4py examples/verify_target.py
"""A target for ``pyar verify`` (docs/guides/verify.md): mpi4py's ``comm.Allreduce`` behind
the target signature ``allreduce(x, comm, op="sum", out=None)``. Check it with
``pyar verify examples/verify_target.py:allreduce --nan mpi``; run as a script, each rank
makes one call and prints the result."""

import numpy as np
from mpi4py import MPI

OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}


def allreduce(x, comm, op="sum", out=None):
    if op not in OPS or x.dtype.name in ("float16", "bfloat16"):
        raise NotImplementedError(f"{op} on {x.dtype}")       # skipped, not failed
    result = np.empty(x.shape, x.dtype)      # C order, as ascontiguousarray(x) is
    comm.Allreduce(np.ascontiguousarray(x), result, op=OPS[op])
    if out is None:
        return result
    out[...] = result                        # out may be x, or strided
    return out


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    print(f"rank {comm.rank}: {allreduce(np.arange(4.0) + comm.rank, comm)}")
