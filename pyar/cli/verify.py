"""``pyar verify TARGET ...``: check an allreduce, reduce_scatter or allgather against an exact
reference over many MPI jobs (:mod:`pyar.verify.driver`)."""

from ..verify import driver


def main(args) -> int:
    return driver.command(args)
