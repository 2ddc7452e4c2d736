"""allreduce: every rank gets the reduction of every rank's ``x`` (seed 1)."""

from functools import partial

from .. import verify
from ..executors import mpi
from . import Collective, register_collective


class Allreduce(Collective):
    name = "allreduce"
    reduces = True
    direct = True
    library_name = "comm.Allreduce"

    def factor(self, size):
        return 2 * (size - 1) / size

    def library_call(self, comm, x, out, reduction, root, start=False):
        return partial(comm.Iallreduce if start else comm.Allreduce,
                       mpi.IN_PLACE if out is x else mpi.typed(x), mpi.typed(out),
                       mpi.library_op(reduction))

    def expected(self, inputs, rank, root, op):
        return verify.reference(inputs, op), verify.magnitude(inputs, op)


ALLREDUCE = register_collective(Allreduce())
