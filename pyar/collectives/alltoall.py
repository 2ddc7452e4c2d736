"""alltoall: block i of ``x`` (``x[i]``) goes to rank i; result block j came from rank j
(seed 4.5)."""

from functools import partial

import numpy as np

from ..executors import mpi
from . import Collective, register_collective


class Alltoall(Collective):
    name = "alltoall"
    blocked = True
    library_name = "comm.Alltoall"

    def factor(self, size):
        return (size - 1) / size

    def check(self, shape, size):
        if not shape or shape[0] != size:
            raise ValueError(f"alltoall needs x.shape[0] == {size} (the number of ranks), "
                             f"got shape {tuple(shape)}")

    def library_call(self, comm, x, out, reduction, root, start=False):
        n = out.nbytes // comm.Get_size()
        return partial(comm.Ialltoall if start else comm.Alltoall,
                       mpi.IN_PLACE if out is x else [x, n, mpi.BYTE], [out, n, mpi.BYTE])

    def expected(self, inputs, rank, root, op):
        return np.stack([np.asarray(x)[rank] for x in inputs]), None

    def shapes(self, size, count):
        return (size, count), (size, count)


ALLTOALL = register_collective(Alltoall())
