"""allreduce: every rank gets the reduction of every rank's ``x``."""

from . import Collective, register_collective
from .reference import magnitude, reference


class Allreduce(Collective):
    name = "allreduce"
    reduces = True
    library_name = "comm.Allreduce"

    def direct(self, count, size, rank, root):
        return slice(0, count), slice(0, count)

    def factor(self, size):
        return 2 * (size - 1) / size

    def expected(self, inputs, rank, root, op):
        return reference(inputs, op), magnitude(inputs, op)


ALLREDUCE = register_collective(Allreduce())
