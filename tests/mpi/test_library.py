"""What pyar detects of the MPI library and the node, collectively, at every rank count."""

import os

import numpy as np
from mpi4py import MPI

from checks import agree
from pyar.runtime import library
from pyar.runtime import progress, shm


def test_shared_memory_works_and_every_rank_of_a_node_reports_the_same(comm):
    shared = shm.probe(comm)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    details = node.allgather(shared)
    agree(comm, shared.works, f"shared memory failed: {shared.detail}")
    agree(comm, all(d == shared for d in details), f"node ranks differ: {details}")
    agree(comm, ("round trip" in shared.detail) == (node.Get_size() > 1), shared.detail)
    node.Free()


def test_the_node_ranks_map_one_memory_and_its_file_is_gone(comm):
    """map_node: each rank's segment (of its own size, from a page on) is seen by every rank
    of the node, and no file of it is left behind."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    before = set(os.listdir(shm._FILES)) if shm._FILES else set()
    segments = shm.map_node(node, 4096 * (node.rank + 1) - 8)    # the ranks' differ
    segments[node.rank].view(np.int64)[-1] = 1000 + node.rank
    node.Barrier()
    seen = [int(segment.view(np.int64)[-1]) for segment in segments]
    sizes = [len(segment) for segment in segments]
    left = {f for f in (set(os.listdir(shm._FILES)) if shm._FILES else set()) - before
            if f.startswith("pyar-")}
    agree(comm, seen == [1000 + r for r in range(node.size)], f"seen: {seen}")
    agree(comm, sizes == [4096 * (r + 1) for r in range(node.size)] and
          all(segment.ctypes.data % 4096 == 0 for segment in segments), f"sizes: {sizes}")
    agree(comm, not left, f"left in {shm._FILES}: {left}")
    node.Free()


def test_the_eager_limit_within_a_node_is_read_where_ranks_share_one(comm):
    lib = library.current()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    if lib.family in library.EAGER_CVARS and node.Get_size() > 1:
        agree(comm, isinstance(lib.eager, int) and 1024 <= lib.eager <= 1 << 20, str(lib))
    node.Free()


def test_a_pool_knows_whether_its_node_has_a_core_for_each_rank(comm):
    mine = comm.Dup()
    pool = shm.pool_of(mine)
    if pool is None:                # PYAR_SHM_BYTES=0: no pools, no mailbox waits
        mine.Free()
        return
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    cores = set().union(*node.allgather(sorted(os.sched_getaffinity(0))))
    expected = node.Get_size() > len(cores)
    agree(comm, pool.cores == len(cores) and pool.oversubscribed == expected,
          f"{pool.cores} cores, oversubscribed {pool.oversubscribed}; expected "
          f"{len(cores)}, {expected}")
    agree(comm, not expected or shm._patience[0] == 0.0, "an oversubscribed node polls on")
    agree(comm, not expected or progress.napping, "an oversubscribed node's waits do not nap")
    node.Free()
    mine.Free()
