"""alltoall: block i of ``x`` (``x[i]``) goes to rank i; result block j came from rank j
(the exchange of MoE and sequence parallelism)."""

import numpy as np

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

    def expected(self, inputs, rank, root, op):
        return np.stack([np.asarray(x)[rank] for x in inputs]), None

    def shapes(self, size, count):
        return (size, count), (size, count)


ALLTOALL = register_collective(Alltoall())
