"""The shared-memory mailboxes on one rank: layout, the pool's life (the protocol
itself runs under MPI: tests/mpi, at every rank count of the matrix)."""

import numpy as np
from mpi4py import MPI

from pyar.runtime import settings
from pyar.runtime import shm


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


def test_a_channel_puts_each_half_on_cache_lines_of_its_own_with_its_stamp_first():
    segment = np.zeros(4096, np.uint8)
    sizes = [8, 100, 64]
    channel = shm.Channel(3, segment, 128, sizes)     # each half: [stamp | bytes], aligned
    assert shm.Channel.bytes(sizes) == 2 * (64 + 128 + 128)
    starts = [half.ctypes.data - segment.ctypes.data for k in range(3)
              for half in channel.slots[k]]
    assert starts == [136, 200, 264, 392, 520, 648]
    assert [len(half) for k in range(3) for half in channel.slots[k]] == [8, 8, 100, 100, 64, 64]
    for k in range(3):
        for h in range(2):
            channel.stamps[k][h][0] = 10 * k + h + 1
    assert [segment[at - 8:at].view(np.int64)[0] for at in starts] == [1, 2, 11, 12, 21, 22]
    assert channel.halves(1, np.dtype(np.float32))[1].shape == (25,)
