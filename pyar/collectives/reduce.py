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

    def direct(self, count, size, rank, root):
        return slice(0, count), slice(0, count if rank == root else 0)

    def prepare(self, x, out, rank, size, root, copy=True, window=None):
        """On the root as allreduce; elsewhere ``out`` is ignored and partial sums land in a
        copy of x (in x itself if ``out is x``; with ``copy`` False, in a new buffer, of
        ``window``'s elements if given: a plan that reads x and uses no other part)."""
        if rank == root:
            return super().prepare(x, out, rank, size, root, copy)
        if window is not None:
            return Work(np.empty(window.stop - window.start, x.dtype), None, _nothing)
        if out is x and x.flags.c_contiguous and x.flags.writeable:
            return Work(x.reshape(-1), None, _nothing)
        if not copy:
            return Work(np.empty(x.size, x.dtype), None, _nothing)
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
