# mpiexec -n 4 python -m mpi4py examples/hello_allreduce.py
"""The first example: every rank holds a 2x3 array of rank+1; after the
allreduce every rank holds 1+2+3+4 = 10 everywhere."""

import numpy as np
from mpi4py import MPI

import pyar

comm = MPI.COMM_WORLD
x = np.full((2, 3), comm.rank + 1, dtype=np.float32)
y = pyar.allreduce(x, op="sum", algorithm="ring")
print(f"rank {comm.rank}: {y.tolist()}", flush=True)
assert np.all(y == comm.size * (comm.size + 1) / 2)
