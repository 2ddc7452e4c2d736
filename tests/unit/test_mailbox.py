"""pyar.kernels.mailbox, in one process: two programs over one channel (a sender's PUT rows and
a receiver's FOLD or COPY rows) fold and copy as reduce_into does, and keep the stamp protocol
of pyar.runtime.shm: a wait gives up after its polls and resumes, a half is reused only once
taken, calls alternate halves, and another call's mark is reported, not folded."""

import ctypes
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pyar.runtime.shm import Channel
from pyar.kernels import DTYPES, OPS, mailbox, reduce_into

run = mailbox.runner()
FINGERPRINT = 5
MARK, OTHER = (7 << 32) | FINGERPRINT, (8 << 32) | FINGERPRINT    # calls number 7 and 8


class Pair:
    """A channel of messages of ``sizes`` bytes in a segment, with a sender's and a
    receiver's program over it (rows built as pyar.runtime.programs.Resident builds them)."""

    def __init__(self, sizes, srcs, dsts, kinds):
        self.segment = np.zeros(4096 + sum(2 * (n + 4096) for n in sizes), np.uint8)
        base = -self.segment.ctypes.data % 64
        self.channel = Channel(1, self.segment, base, sizes)
        self.keep = srcs, dsts
        self.put = np.array([(mailbox.PUT, *a, s.ctypes.data, s.nbytes, 0, 0)
                             for a, s in zip(self.channel.addresses, srcs)], np.int64)
        self.take = np.array([(row, *a, d.ctypes.data, d.nbytes, k, 0) for a, d, (row, k)
                              in zip(self.channel.addresses, dsts, kinds)], np.int64)

    def send(self, half, mark=MARK, start=0, spins=100):
        return run(self.put.ctypes.data, len(self.put), start, half, FINGERPRINT, mark >> 32,
                   spins)

    def receive(self, half, mark=MARK, start=0, spins=100):
        return run(self.take.ctypes.data, len(self.take), start, half, FINGERPRINT,
                   mark >> 32, spins)

    def stamp(self, k, half):
        return self.channel.stamps[k][half][0]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES), op=st.sampled_from(OPS),
       n=st.integers(0, 40))
def test_a_fold_row_is_reduce_into_on_any_bits(data, dtype, op, n):
    bits = [np.frombuffer(data.draw(st.binary(min_size=n * dtype.itemsize,
                                              max_size=n * dtype.itemsize)), dtype).copy()
            for _ in range(2)]
    src, dst = bits
    expected = dst.copy()
    reduce_into(expected, src, op)
    pair = Pair([src.nbytes], [src], [dst], [(mailbox.FOLD, mailbox.kind(dtype, op))])
    assert pair.send(0) == 1 and pair.receive(0) == 1
    assert dst.tobytes() == expected.tobytes()
    assert pair.stamp(0, 0) == 0


def test_the_stamp_protocol():
    src = [np.arange(4, dtype=np.float64), np.arange(3, dtype=np.int32)]
    dst = [np.ones(4), np.zeros(3, np.int32)]
    pair = Pair([32, 12], src, dst,
                [(mailbox.FOLD, mailbox.kind(np.float64, "sum")), (mailbox.COPY, 0)])
    assert pair.receive(0) == 0                 # nothing in: gives up at row 0, folds nothing
    assert (dst[0] == 1).all()
    assert pair.send(0) == 2 and pair.stamp(0, 0) == MARK and pair.stamp(1, 0) == MARK
    assert pair.send(0) == 0                    # half 0 not taken yet: the next put waits
    assert pair.send(1, OTHER) == 2             # the next call's half is free
    assert pair.receive(0, OTHER) == -1         # another call's mark: reported, left there
    assert pair.stamp(0, 0) == MARK and (dst[0] == 1).all()
    assert pair.receive(0, start=0, spins=1) == 2
    assert dst[0].tolist() == [1, 2, 3, 4] and dst[1].tolist() == [0, 1, 2]
    assert pair.stamp(0, 0) == 0 and pair.stamp(1, 0) == 0
    assert pair.receive(1, OTHER, start=1) == 2     # resumed at row 1: row 0 untouched
    assert pair.stamp(0, 1) == OTHER and pair.stamp(1, 1) == 0
    assert pair.receive(1, OTHER) == 1          # row 0 folded; row 1's half taken already
    assert dst[0].tolist() == [1, 3, 5, 7] and pair.stamp(0, 1) == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_kind_names_the_fold_of_every_dtype_and_op(dtype):
    kinds = {mailbox.kind(dtype, op) for op in OPS}
    assert len(kinds) == len(OPS)
    with pytest.raises(ValueError):
        mailbox.kind(dtype, "avg")


def test_local_rows_fold_and_copy_without_stamps():
    """A FOLD or COPY row whose stamps are 0 reads any memory (an out-of-place call's x) and
    neither waits nor marks: it runs with every mailbox empty, in either half."""
    x, data = np.arange(5, dtype=np.int64), np.full(5, 10, np.int64)
    kind = mailbox.kind(np.int64, "sum")
    rows = np.array([(mailbox.COPY, 0, 0, x.ctypes.data, x.ctypes.data, data.ctypes.data,
                      16, 0, 0),
                     (mailbox.FOLD, 0, 0, x.ctypes.data, x.ctypes.data, data.ctypes.data,
                      40, kind, 0)], np.int64)
    for half, expected in ((0, [0, 2, 12, 13, 14]), (1, [0, 2, 14, 16, 18])):
        assert run(rows.ctypes.data, 2, 0, half, FINGERPRINT, 7, 1) == 2
        assert data.tolist() == expected
    assert run(rows.ctypes.data, 2, 1, 0, FINGERPRINT, 7, 1) == 2     # from row 1 on only
    assert data.tolist() == [0, 3, 16, 19, 22]



def _readable_here() -> bool:
    """Whether this process may read its own memory with process_vm_readv."""
    x, got = np.arange(4, dtype=np.int64), np.zeros(4, np.int64)
    try:
        readv = ctypes.CDLL(None, use_errno=True).process_vm_readv
    except AttributeError:
        return False
    readv.restype = ctypes.c_ssize_t
    local = (ctypes.c_void_p * 2)(got.ctypes.data, 32)     # (an iovec: base, length)
    remote = (ctypes.c_void_p * 2)(x.ctypes.data, 32)
    return readv(os.getpid(), local, 1, remote, 1, 0) == 32 and got.tolist() == [0, 1, 2, 3]


@pytest.mark.skipif(not _readable_here(), reason="process_vm_readv is refused here")
@pytest.mark.parametrize("nbytes", [0, 8, mailbox.BOUNCE - 8, 3 * mailbox.BOUNCE + 24])
@pytest.mark.parametrize("past", [0, 16])
def test_get_fold_reads_the_offer_and_folds_it_into_dst_or_from_x(nbytes, past):
    """An OFFER row leaves where the message lies; GET_FOLD reads it from the offering process
    (here this one) and folds it into dst, or with x (the last column) makes dst = x op
    message, also where dst lies just past x modulo a page (``past`` bytes: the fold then
    goes through the bounce); the offer's TAKEN then finds the half free. Pieces of BOUNCE
    and a remainder."""
    n = nbytes // 8
    memory = np.zeros(2 * n + 4096, np.float64)
    start = -memory.ctypes.data % 4096 // 8            # x from a page's start, dst past it
    x = memory[start:start + n]
    x[:] = 0.5
    message = np.arange(n, dtype=np.float64)
    segment = np.zeros(4 * (mailbox.BOUNCE_AT + mailbox.BOUNCE) + 16384, np.uint8)
    channel = Channel(1, segment, -segment.ctypes.data % 64,
                      [mailbox.BOUNCE_AT + mailbox.BOUNCE])
    (s0, s1, b0, b1), = channel.addresses
    kind = mailbox.kind(np.float64, "sum")
    for into_x in (False, True):
        at = start + n + (-n % 512) + past // 8      # (dst - x: a multiple of 4 KiB, + past)
        dst = memory[at:at + n]
        dst[:] = 10.0
        offer = np.array([(mailbox.OFFER, s0, s1, b0, b1, message.ctypes.data, nbytes,
                           os.getpid(), 0),
                          (mailbox.TAKEN, s0, s1, 0, 0, 0, 0, 0, 0)], np.int64)
        get = np.array([(mailbox.GET_FOLD, s0, s1, b0, b1, dst.ctypes.data, nbytes, kind,
                         x.ctypes.data if into_x else 0)], np.int64)
        assert run(offer.ctypes.data, 2, 0, 1, FINGERPRINT, 7, 100) == 1   # not taken yet
        assert run(get.ctypes.data, 1, 0, 1, FINGERPRINT, 7, 100) == 1
        assert run(offer.ctypes.data, 2, 1, 1, FINGERPRINT, 7, 100) == 2
        assert dst.tolist() == (message + (0.5 if into_x else 10.0)).tolist()
