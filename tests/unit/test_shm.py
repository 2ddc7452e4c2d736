"""The shared-memory mailboxes on one rank: layout, the pool's life (the protocol
itself runs under MPI: tests/mpi, at every rank count of the matrix)."""

import ctypes
import mmap
import platform
import time

import numpy as np
import pytest
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
    assert pool.node == MPI.COMM_NULL and pool.segments == []
    monkeypatch.setenv("PYAR_SHM_BYTES", "0")
    comm = MPI.COMM_SELF.Dup()
    assert shm.pool_of(comm) is None
    comm.Free()


def test_a_channel_puts_each_half_on_cache_lines_of_its_own_with_its_stamp_first():
    segment = np.zeros(4096, np.uint8)
    sizes = [8, 100, 64]
    channel = shm.Channel(3, segment, 128, sizes)     # each half: [stamp | bytes], aligned
    assert shm.Channel.layout(segment.ctypes.data, 128, sizes)[1] == 128 + 2 * (64 + 128 + 128)
    starts = [half.ctypes.data - segment.ctypes.data for k in range(3)
              for half in channel.slots[k]]
    assert starts == [136, 200, 264, 392, 520, 648]
    assert [len(half) for k in range(3) for half in channel.slots[k]] == [8, 8, 100, 100, 64, 64]
    for k in range(3):
        for h in range(2):
            channel.stamps[k][h][0] = 10 * k + h + 1
    assert [segment[at - 8:at].view(np.int64)[0] for at in starts] == [1, 2, 11, 12, 21, 22]
    assert channel.halves(1, np.dtype(np.float32))[1].shape == (25,)


@pytest.mark.parametrize("base", [0, 64, 2048, 4032])
def test_a_half_of_a_page_or_more_starts_mid_page_away_from_page_aligned_buffers(base):
    segment = np.zeros(8 << 20, np.uint8)
    origin = segment.ctypes.data
    base += -origin % 4096
    sizes = [1 << 17, 100, 4096, 4095]
    channel = shm.Channel(1, segment, base, sizes)
    starts, end = shm.Channel.layout(origin, base, sizes)
    stamps = [a for pair in channel.addresses for a in pair[:2]]
    assert stamps == [origin + at for pair in starts for at in pair]
    pages = [at % 4096 for at in stamps]
    assert pages[:2] == pages[4:6] == [2048, 2048]          # 128 KiB and 4 KiB: mid-page
    assert all(at % 64 == 0 for at in stamps)               # the others: on a cache line
    assert stamps[2] - stamps[1] == 64 + (1 << 17) and stamps[3] - stamps[2] == 128
    assert stamps[6] - stamps[5] == 64 + 4096 and stamps[7] - stamps[6] == 4096 + 64
    assert all(a < b for a, b in zip(stamps, stamps[1:]))   # in order, none overlapping
    assert origin + end == stamps[-1] + 4096 + 64


def _huge_kib(lo: int, hi: int) -> int:
    """AnonHugePages (KiB) of this process's mappings that lie within [lo, hi)."""
    return sum(int(values[0]) for values in _smaps(lo, hi, "AnonHugePages:"))


def _smaps(lo: int, hi: int, name: str) -> list[list[str]]:
    """The values of field ``name`` of each of this process's mappings within [lo, hi)."""
    found, inside = [], False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            field = line.split()
            if "-" in field[0] and not field[0].endswith(":"):
                start, end = (int(v, 16) for v in field[0].split("-"))
                inside = lo <= start and end <= hi
            elif inside and field[0] == name:
                found.append(field[1:])
    return found


def _collapses() -> bool:
    """Whether this kernel has transparent huge pages and MADV_COLLAPSE (Linux 6.1+)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return False
        release = tuple(int(v) for v in platform.release().split(".")[:2])
    except (OSError, ValueError):
        return False
    return release >= (6, 1)


def test_huge_pages_keeps_the_bytes_and_backs_the_whole_huge_pages_within():
    """shm.huge_pages on an array of 4 KiB pages (a fresh private mapping of its own, advised
    against huge pages: the allocator may hand back pages an earlier array left huge): the
    bytes stay, the whole 2 MiB pages inside the array are advised (MADV_HUGEPAGE: the "hg"
    flag of their mappings), and where the kernel collapses (MADV_COLLAPSE) some of
    them are huge pages after, none before; any array, even one with no whole huge page or
    none at all, is accepted. (A collapse is advice too: under load the kernel refuses it
    for the moment, EAGAIN, for most of them; asked again here.)"""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    huge = 2 << 20
    fresh = mmap.mmap(-1, 5 * huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buffer = np.frombuffer(fresh, np.uint8)
    libc.madvise(buffer.ctypes.data, buffer.nbytes, 15)     # MADV_NOHUGEPAGE
    buffer[:] = np.arange(buffer.size) % 251
    a = buffer[100:]
    lo = -(-a.ctypes.data // huge) * huge
    hi = (a.ctypes.data + a.nbytes) // huge * huge
    assert _huge_kib(lo, hi) == 0
    shm.huge_pages(a)
    assert np.array_equal(buffer, np.arange(buffer.size) % 251)
    flags = _smaps(lo, hi, "VmFlags:")
    assert flags and all("hg" in f and "nh" not in f for f in flags), flags
    if _collapses():
        for _ in range(10):
            if _huge_kib(lo, hi) == (hi - lo) >> 10:
                break
            time.sleep(0.05)
            shm.huge_pages(a)
        assert _huge_kib(lo, hi) > 0
        assert np.array_equal(buffer, np.arange(buffer.size) % 251)
    for small in (np.zeros(0), np.zeros(3), a[:huge // 2]):
        shm.huge_pages(small)
