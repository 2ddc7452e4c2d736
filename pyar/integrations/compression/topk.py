"""``topk:RATIO``: the ``k = ceil(RATIO n)`` largest magnitudes, as indices and values, allgathered.

Each rank sends its k largest ``|p|`` (p = g + residual) as k int32 indices
and k float32 values (one int32 buffer of 2k) through one allgather; every
rank sums the N sparse contributions in rank order into a dense float32 and
divides by N (identical on every rank). Bytes sent per rank: ``(N-1) · 8k``
with the ring/bruck allgather (against ``2 (N-1)/N · 4n`` for a float32 ring
allreduce: ``n / (N k)`` times less). Error of one rank's contribution: the
other ``n - k`` elements, ``|d - p| <= |p|_(k+1)`` (the (k+1)-th largest
magnitude). Top-k is biased: without error feedback (``TopK(r,
error_feedback=False)``) the coordinates that are never among the largest
are never updated, and training does visibly worse; with it (the default)
every coordinate is sent once its residual has grown enough.
"""

from __future__ import annotations

import math

import numpy as np

from ... import api
from . import Transform, register, sent_bytes


class TopK(Transform):
    def __init__(self, ratio, error_feedback: bool = True):
        try:
            ratio = float(ratio)
        except (TypeError, ValueError):
            raise ValueError(f"topk takes a ratio in (0, 1], e.g. 'topk:0.01', got {ratio!r}") \
                from None
        if not 0 < ratio <= 1:
            raise ValueError(f"topk takes a ratio in (0, 1], got {ratio!r}")
        self.ratio, self.error_feedback = ratio, bool(error_feedback)
        self.name = f"topk:{ratio:g}" + ("" if error_feedback else " (no error feedback)")

    def k(self, count: int) -> int:
        return min(count, max(1, math.ceil(self.ratio * count)))

    def contribution(self, p, size, decode=True):
        if p.size >= 2 ** 31:
            raise ValueError(f"topk: a bucket of {p.size} elements is too large for int32 "
                             f"indices; use a smaller bucket_cap_mb")
        k = self.k(p.size)
        index = np.sort(np.argpartition(np.abs(p), p.size - k)[p.size - k:]).astype(np.int32)
        payload = np.concatenate([index, p[index].view(np.int32)])
        if not decode:
            return payload, None
        decoded = np.zeros_like(p)
        decoded[index] = p[index]
        return payload, decoded

    def exchange(self, payload, count, comm, timeout):
        gathered = yield api.iallgather(payload, comm=comm, timeout=timeout)
        k = payload.size // 2
        total = np.zeros(count, np.float32)
        for row in gathered:                 # rank order; indices are distinct within a row
            total[row[:k]] += row[k:].view(np.float32)
        total /= np.float32(comm.size)
        return total

    def wire_bytes(self, count, comm):
        return sent_bytes("allgather", 2 * self.k(count), np.int32, comm)


register("topk", lambda ratio: TopK(ratio))
