# mpiexec -n 4 python -m mpi4py examples/custom_algorithm.py
"""A new allreduce algorithm in a few dozen lines: a pipelined chain.

The data is cut into segments that flow down the chain 0 -> 1 -> ... -> N-1,
each rank folding in its own contribution; the last rank then sends each
finished segment back up the chain. With S segments every link is busy at
once, as in NCCL's chain/tree pipelines. Written as pure data, it is checked
with the simulator for many sizes before it ever runs on MPI.
"""

import numpy as np
from mpi4py import MPI

import pyar
from pyar.core.schedule import Chunk, Recv, Send, compact, split

SEGMENTS = 4


@pyar.register_algorithm("pipelined_chain")
def pipelined_chain(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    segments = [Chunk("data", lo, hi) for lo, hi in split(count, SEGMENTS)]
    first, last = rank == 0, rank == size - 1
    steps = []
    # reduce down the chain: in step t fold segment t from rank-1 and pass on the
    # segment folded in step t-1 (rank 0 has nothing to fold: it passes segment t)
    for t in range(SEGMENTS + 1):
        ahead = t if first else t - 1
        steps.append(([Recv(rank - 1, segments[t], reduce=True)] if not first and t < SEGMENTS
                      else []) +
                     ([Send(rank + 1, segments[ahead])] if not last and 0 <= ahead < SEGMENTS
                      else []))
    # broadcast back up the chain the same way; the last rank holds the result
    for t in range(SEGMENTS + 1):
        ahead = t if last else t - 1
        steps.append(([Recv(rank + 1, segments[t])] if not last and t < SEGMENTS else []) +
                     ([Send(rank - 1, segments[ahead])] if not first and 0 <= ahead < SEGMENTS
                      else []))
    return compact(steps)


def check_in_simulator():
    """Every rank count 1..16 and awkward counts, against numpy, with no MPI."""
    for size in range(1, 17):
        for count in (0, 1, 3, size + 1, 1000):
            inputs = [np.arange(count, dtype=np.int64) * (r + 2) + 1000 * (r + 1)
                      for r in range(size)]
            result = pyar.simulate(pyar.schedule("pipelined_chain", size, count), inputs)
            for out in result.outputs:
                assert np.array_equal(out, sum(inputs)), (size, count)
    stats = pyar.simulate(pyar.schedule("pipelined_chain", 4, 4096),
                          [np.ones(4096, np.float32)] * 4).stats
    return stats


comm = MPI.COMM_WORLD
if comm.rank == 0:
    stats = check_in_simulator()
    print("simulated N=1..16: correct; at N=4 each rank sends",
          [s.bytes_sent for s in stats], "bytes in", [s.steps for s in stats], "steps")

x = np.arange(10_000, dtype=np.float64) + 1000 * (comm.rank + 1)
y = pyar.allreduce(x, algorithm="pipelined_chain")
expected = np.empty_like(x)
comm.Allreduce(x, expected)
assert np.array_equal(y, expected), "pipelined_chain disagrees with MPI_Allreduce"
print(f"rank {comm.rank}: pipelined_chain over MPI matches MPI_Allreduce", flush=True)
