"""allgather: every rank gets every rank's ``x``, stacked: shape ``(size, *x.shape)`` (the second
half of ZeRO's and FSDP's allreduce)."""

import sys

import numpy as np

from ..core import buffers
from . import Collective, Work, block, register_collective


class Allgather(Collective):
    name = "allgather"
    in_place = False
    blocked = True
    library_name = "comm.Allgather"

    def factor(self, size):
        return (size - 1) / size

    def count(self, x_size, size):
        return x_size * size

    def x_size(self, count, size):
        return count // size

    def result_shape(self, shape, size, rank):
        return (size, *shape)

    def load(self, x, rank, size):
        data = (np.zeros(x.size * size, x.dtype) if isinstance(x, np.ndarray) else
                sys.modules["cupy"].empty(x.size * size, x.dtype))   # the schedule fills it
        data[block(data.size, size, rank)] = x.reshape(-1)
        return data

    def result(self, data, shape, rank, size, root):
        return data.reshape((size, *shape))

    def direct(self, count, size, rank, root):
        return block(count, size, rank), slice(0, count)

    def prepare(self, x, out, rank, size, root, copy=True):
        shape = (size, *x.shape)
        if out is None:
            out = np.empty(shape, x.dtype)
        else:
            buffers.check_out(out, shape, x.dtype, "the gathered")
        direct = out.flags.c_contiguous
        data = out.reshape(-1) if direct else np.empty(out.size, x.dtype)
        load = buffers.loader(data[block(data.size, size, rank)], x) if copy else None
        if copy:
            load()

        def finish():
            if not direct:
                out[...] = data.reshape(shape)
            return out
        return Work(data, None, finish, load)

    def library_buffers(self, x, work, rank, root):
        return x.reshape(-1) if x.flags.c_contiguous else x.copy().reshape(-1), work.data, None

    def expected(self, inputs, rank, root, op):
        return np.stack([np.asarray(x) for x in inputs]), None

    def shapes(self, size, count):
        return (count,), (size, count)


ALLGATHER = register_collective(Allgather())
