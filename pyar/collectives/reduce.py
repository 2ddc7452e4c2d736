"""reduce: the reduction of every rank's ``x`` on ``root``; the other ranks get None."""

import numpy as np

from ..core import buffers
from . import Collective, Work, register_collective
from .reference import magnitude, reference


class Reduce(Collective):
    name = "reduce"
    reduces = True
    rooted = True
    library_name = "comm.Reduce"

    def factor(self, size):
        return 1.0

    def result(self, data, shape, rank, size, root):
        return data.reshape(shape) if rank == root else None

    def prepare(self, x, out, rank, size, root, copy=True):
        """On the root as allreduce; elsewhere ``out`` is ignored and partial sums land in a
        copy of x (in x itself if ``out is x``)."""
        if rank == root:
            return super().prepare(x, out, rank, size, root)
        if out is x and x.flags.c_contiguous and x.flags.writeable:
            return Work(x.reshape(-1), None, _nothing)
        data = np.array(x, order="C").reshape(-1)
        return Work(data, None, _nothing, buffers.loader(data, x))

    def library_buffers(self, x, work, rank, root):
        return work.data, work.data if rank == root else None, None

    def expected(self, inputs, rank, root, op):
        if rank != root:
            return None, None
        return reference(inputs, op), magnitude(inputs, op)


def _nothing():
    return None


REDUCE = register_collective(Reduce())
