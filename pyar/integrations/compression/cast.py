"""``fp16`` / ``bf16``: cast to a half type, allreduce, cast back (torch's fp16_compress_hook).

Each rank divides by N in float32 first (so the sum cannot overflow float16
where the average does not), casts to the half type and allreduces it (sum,
folded in the half type: ``reduce_dtype`` the half type, so the messages carry
half types, each fold through float32 rounded to it); the result is cast back
to float32. Bytes sent per rank: those of a half-type allreduce of
n elements, half of float32's. Error of one rank's contribution: one rounding,
``|d - p| <= 2**-11 |p|`` for float16 in its normal range (``2**-8`` for
bfloat16); the sum adds a rounding per fold. No error feedback by default
(``Cast("fp16", error_feedback=True)`` keeps the rounding residual). An
average beyond float16's range (65504) becomes inf, as in torch's hook.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ... import api, kernels
from . import Transform, register, sent_bytes

DTYPES = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
EPS = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}     # unit roundoff


class Cast(Transform):
    def __init__(self, name: str = "fp16", error_feedback: bool = False):
        if name not in DTYPES:
            raise ValueError(f"Cast takes one of {sorted(DTYPES)}, got {name!r}")
        self.name, self.dtype, self.error_feedback = name, DTYPES[name], bool(error_feedback)
        self.eps = EPS[name]

    def contribution(self, p, size, decode=True):
        payload = np.empty(p.size, self.dtype)
        kernels.cast_into(payload, p / np.float32(size))
        if not decode:
            return payload, None
        decoded = np.empty(p.size, np.float32)
        kernels.cast_into(decoded, payload)
        return payload, np.multiply(decoded, np.float32(size), out=decoded)

    def exchange(self, payload, count, comm, timeout):
        total = yield api.iallreduce(payload, payload, op="sum", comm=comm, timeout=timeout,
                                     reduce_dtype=self.dtype)
        average = np.empty(total.size, np.float32)
        kernels.cast_into(average, total)
        return average

    def wire_bytes(self, count, comm):
        return sent_bytes("allreduce", count, self.dtype, comm)


register("fp16", lambda: Cast("fp16"))
register("bf16", lambda: Cast("bf16"))
