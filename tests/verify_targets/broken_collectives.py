"""Deliberately broken reduce_scatter and allgather for the tests of ``pyar verify
--collective``: pyar's ring, then one bug each, wrong under one condition only."""

import numpy as np

import pyar


def reduce_scatter_unfolded_tail(x, comm, op="sum", out=None):
    """The last rank's block keeps its own contribution in its final element (a fold loop
    one short) where the ranks do not divide the count: correct on equal blocks."""
    own = np.array(x).reshape(-1)[-1:]
    result = pyar.reduce_scatter(x, out=out, op=op, algorithm="ring", comm=comm)
    if comm.Get_rank() == comm.Get_size() - 1 and x.size % comm.Get_size() and result.size:
        result[-1] = own[0]
    return result


def allgather_swapped(x, comm, out=None):
    """Ranks 0 and 1's pieces land in each other's place (an off-by-one in the placement of
    the first exchange)."""
    result = pyar.allgather(x, out=out, algorithm="ring", comm=comm)
    if comm.Get_size() > 1:
        result[[0, 1]] = result[[1, 0]]
    return result
