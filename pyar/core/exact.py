"""Reproducible sums of floats: fixed point against a shared exponent, added in integers.

A float sum's bits depend on the order of its additions, so on the algorithm, the rank
count and order, the segment size and the message split. Integers add exactly and in any
order, so a sum taken in integers does not. ``reproducible=True`` reduces a float array
``x`` (n ranks) in three phases, the collectives of any algorithm:

1. **exponents**: per element the binary exponent ``e`` with ``|x| < 2**e`` (int16;
   :data:`ZERO` for 0, :data:`SPECIAL` for inf and NaN), reduced with max: every rank
   then holds the element's shared exponent ``E``, the same whichever ranks hold what.
2. **limbs**: per element the integer ``v = rint(x * 2**(62 - E))`` (``|v| <= 2**62``),
   as two int64 limbs ``v = hi * 2**31 + lo`` (``0 <= lo < 2**31``), reduced with sum:
   exact for fewer than ``2**31`` ranks. An element that is inf or NaN on some rank
   counts them instead (+inf in ``hi``, -inf in ``lo``, NaN in ``lo`` from bit 32).
3. **decode**: the carry propagated, ``hi * 2**(E - 31) + lo * 2**(E - 62)`` in float64
   (one rounding), divided by n for avg (another), rounded to x's dtype.

The result is therefore a function of the multiset of contributions alone (a rank that
contributes zeros changes nothing). Its error against the exact sum ``S`` of the
inputs, per element: each input rounded to the grid ``2**(E - 62)``, so at most
``n * 2**(E - 63)`` (``2**-62`` of the largest input's power of two per rank), then the
roundings of the decode: half an ulp of float64, and for float32, float16 and bfloat16
half an ulp of theirs (through float64: at most ``2**-29`` of an ulp more for float32).
An exact zero comes out +0.0; non-finite elements are NaN (a canonical quiet NaN)
where a NaN or both infinities meet, else the infinity.

Cost: 2 + 16 bytes per element on the wire (int16 exponents, two int64 limbs) where the
dtype takes 8, 4 or 2 (2.25x float64's bytes, 4.5x float32's, 9x a half type's), two
collectives one after the other, and three passes over the data, one per phase (Numba
kernels, :mod:`pyar.kernels.exact`). Exact as stated for fewer than ``2**22`` ranks (the
decode's float64 conversion of the high limb); half types are widened to float32 first
(exactly) and decoded through float64. Host (numpy) arrays only.
"""

from __future__ import annotations

import numpy as np

from .. import kernels
from ..kernels.exact import SPECIAL, ZERO  # noqa: F401  (the exponents' codes, as documented)
from . import ops


def reduction(x: np.ndarray, divisor: int = 1):
    """Generator: the phases of a reproducible sum of flat float numpy array ``x`` (divided
    by ``divisor`` for avg). Yields ``(contribution, op)`` for each allreduce, is sent its
    result (on every rank alike), returns the sum as an array of x's dtype."""
    if not isinstance(x, np.ndarray) or not ops.is_float(x.dtype):
        raise TypeError(f"reproducible sums take float numpy arrays, got "
                        f"{type(x).__name__} {getattr(x, 'dtype', '')}")
    w = _wide(x)
    shared = yield exponents(w), "max"
    total = yield limbs(w, shared), "sum"
    return decode(total, shared, x.dtype, divisor)


def _wide(x: np.ndarray) -> np.ndarray:
    """``x`` flat and contiguous in float32 or float64 (half types widened, exactly)."""
    if x.dtype in ops.HALF:
        w = np.empty(x.size, np.float32)
        kernels.cast_into(w, np.ascontiguousarray(x.reshape(-1)))
        return w
    return np.ascontiguousarray(x.reshape(-1))


def exponents(w: np.ndarray) -> np.ndarray:
    """Phase 1's contribution: per element of ``w`` (float32/64, flat) the int16 ``e`` with
    ``|w| < 2**e``; :data:`ZERO` for 0, :data:`SPECIAL` for inf and NaN."""
    e = np.empty(w.size, np.int16)
    kernels.exponents_into(e, w)
    return e


def limbs(w: np.ndarray, shared: np.ndarray) -> np.ndarray:
    """Phase 2's contribution: the (2, w.size) int64 limbs of ``w`` against the ``shared``
    exponents (phase 1's max); counts where an element is :data:`SPECIAL`."""
    out = np.empty((2, w.size), np.int64)
    kernels.limbs_into(out[0], out[1], w, shared)
    return out


def decode(total: np.ndarray, shared: np.ndarray, dtype, divisor: int = 1) -> np.ndarray:
    """The sum (divided by ``divisor`` for avg) of the contributions whose limbs summed to
    ``total`` against ``shared``, as a flat array of ``dtype``."""
    dtype = np.dtype(dtype)
    out = np.empty(shared.size, dtype if dtype in (np.float32, np.float64) else np.float64)
    kernels.decode_into(out, total[0], total[1], shared, divisor)
    if out.dtype != dtype:                  # a half type: rounded from float64 once
        with np.errstate(over="ignore"):
            return out.astype(dtype)
    return out
