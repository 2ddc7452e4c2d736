"""The shared-memory mailboxes on one rank: layout, the pool's life (the protocol
itself runs under MPI: tests/mpi, at every rank count of the matrix)."""

import numpy as np
from mpi4py import MPI

from pyar import settings
from pyar.executors import shm


def test_a_pool_is_made_once_aligned_and_freed_with_its_communicator(monkeypatch):
    monkeypatch.setattr(settings, "_agreed", None)          # PYAR_SHM_BYTES as set here
    monkeypatch.setenv("PYAR_SHM_BYTES", "1000")           # rounded up to a page
    comm = MPI.COMM_SELF.Dup()
    pool = shm.pool_of(comm)
    assert shm.pool_of(comm) is pool and len(pool.segments) == 1
    assert len(pool.segments[0]) == 4096 and (pool.segments[0].ctypes.data + pool.used) % 64 == 0
    comm.Free()
    assert pool.win == MPI.WIN_NULL and pool.segments == []
    monkeypatch.setenv("PYAR_SHM_BYTES", "0")
    comm = MPI.COMM_SELF.Dup()
    assert shm.pool_of(comm) is None
    comm.Free()


def test_a_channel_puts_each_slot_and_counter_on_its_own_cache_lines():
    segment = np.zeros(4096, np.uint8)
    sizes = [8, 100, 64]
    channel = shm.Channel(3, segment, 128, sizes)     # each slot: a mark's line, its bytes
    assert channel.m == 3 and shm.Channel.bytes(sizes) == 2 * 64 + 2 * (3 * 64 + 64 + 128 + 64)
    starts = [half.ctypes.data - segment.ctypes.data for k in range(3)
              for half in channel.slots[k]]
    assert starts == [320, 448, 576, 768, 960, 1088]
    channel.marks[1][1][0] = 9
    assert segment[704:712].view(np.int64)[0] == 9
    assert [len(half) for k in range(3) for half in channel.slots[k]] == [8, 8, 100, 100, 64, 64]
    channel.posted[0], channel.taken[0] = 5, 7
    assert segment[128:136].view(np.int64)[0] == 5 and segment[192:200].view(np.int64)[0] == 7
    assert channel.halves(1, np.dtype(np.float32))[1].shape == (25,)
