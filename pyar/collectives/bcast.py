"""bcast: the root's ``x`` into every rank's ``x`` (in place; returns x)."""

import numpy as np

from ..core import buffers
from . import Collective, Work, register_collective


class Bcast(Collective):
    name = "bcast"
    rooted = True
    out_of_place = False
    library_name = "comm.Bcast"

    def factor(self, size):
        return 1.0

    def prepare(self, x, out, rank, size, root, copy=True):
        if not x.flags.writeable:
            raise ValueError("x is read-only; bcast writes the root's data into it")
        work = buffers.prepare(x, x)
        return Work(work.data, None, work.finish, work.load)

    def expected(self, inputs, rank, root, op):
        return np.asarray(inputs[root]), None


BCAST = register_collective(Bcast())
