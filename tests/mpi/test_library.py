"""What pyar detects of the MPI library and the node, collectively, at every rank count."""

import os

from mpi4py import MPI

from checks import agree
from pyar.runtime import library
from pyar.runtime import progress, shm


def test_shared_windows_work_and_every_rank_of_a_node_reports_the_same(comm):
    windows = library.shared_windows(comm)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    details = node.allgather(windows)
    agree(comm, windows.works, f"MPI_Win_allocate_shared failed: {windows.detail}")
    agree(comm, all(d == windows for d in details), f"node ranks differ: {details}")
    agree(comm, ("round trip" in windows.detail) == (node.Get_size() > 1), windows.detail)
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
