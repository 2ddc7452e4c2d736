"""``int8``: per-chunk scales, two phases (alltoall, then allgather), correct for any N.

The bucket (n float32) is cut into N equal blocks (zero-padded), each of
chunks of ``CHUNK`` elements with one float32 scale ``max|x| / 127``; a
block is its int8 values and its scales, ``b + 4 b / CHUNK`` bytes:

    phase 1  alltoall: rank r gets block r of every rank, dequantizes them
             and averages them in float32 (ranks in order: deterministic)
    phase 2  rank r requantizes its averaged block; allgather; every rank
             dequantizes all N blocks (the same bytes: identical results)

Bytes sent per rank: ``2 (N-1)/N · n (1 + 4/CHUNK)`` with the pairwise/linear
alltoall and ring/bruck allgather: about a quarter of a float32 ring
allreduce's ``2 (N-1)/N · 4n``, at any N. Error: each quantization is off
by at most half a step, ``max|x_chunk| / 254``; error feedback (on by
default) keeps phase 1's residual on each rank; phase 2's requantization
error (of the average) is not fed back. Gradients must be finite.
"""

from __future__ import annotations

import numpy as np

from ... import api
from . import Transform, register, sent_bytes

CHUNK = 256


def quantize(x: np.ndarray):
    """(int8 values, float32 scales per CHUNK) of float32 ``x`` (its size a multiple of CHUNK)."""
    chunks = x.reshape(-1, CHUNK)
    scales = (np.abs(chunks).max(axis=1) / np.float32(127)).astype(np.float32)
    safe = np.where(scales > 0, scales, np.float32(1))
    q = np.rint(chunks / safe[:, None]).astype(np.int8)     # |q| <= 127
    return q.reshape(-1), scales


def dequantize(q: np.ndarray, scales: np.ndarray) -> np.ndarray:
    return (q.reshape(-1, CHUNK).astype(np.float32) * scales[:, None]).reshape(-1)


class Int8(Transform):
    name = "int8"
    phases = 2

    def __init__(self, error_feedback: bool = True):
        self.error_feedback = bool(error_feedback)

    @staticmethod
    def _block(count: int, size: int) -> int:
        per = -(-count // size)
        return max(CHUNK, -(-per // CHUNK) * CHUNK)

    def contribution(self, p, size, decode=True):
        b = self._block(p.size, size)
        padded = np.zeros(b * size, np.float32)
        padded[:p.size] = p
        q, scales = quantize(padded)
        return _pack(q, scales, size), dequantize(q, scales)[:p.size] if decode else None

    def exchange(self, payload, count, comm, timeout):
        size = comm.size
        got = yield api.ialltoall(payload, comm=comm, timeout=timeout)
        total = None
        for j in range(size):               # block comm.rank from every rank, in rank order
            part = dequantize(*_unpack(got[j:j + 1], 1))
            total = part if total is None else total + part
        q, scales = quantize(total / np.float32(size))
        gathered = yield api.iallgather(_pack(q, scales, 1)[0], comm=comm, timeout=timeout)
        return dequantize(*_unpack(gathered, size))[:count]

    def wire_bytes(self, count, comm):
        size = comm.size
        b = self._block(count, size)
        row = b + 4 * (b // CHUNK)
        return (sent_bytes("alltoall", size * row, np.uint8, comm) +
                sent_bytes("allgather", row, np.uint8, comm))


def _pack(q, scales, size):
    """(size, b + 4 b/CHUNK) uint8: per block its int8 values, then its scales' bytes."""
    return np.concatenate([q.view(np.uint8).reshape(size, -1),
                           scales.view(np.uint8).reshape(size, -1)], axis=1)


def _unpack(rows, size):
    b = rows.shape[1] * CHUNK // (CHUNK + 4)
    q = np.ascontiguousarray(rows[:, :b]).view(np.int8).reshape(-1)
    scales = np.ascontiguousarray(rows[:, b:]).view(np.float32).reshape(-1)
    return q, scales


register("int8", lambda: Int8())
