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
collectives one after the other, and about ten vector passes to encode and decode.
Exact as stated for fewer than ``2**22`` ranks (the decode's float64 conversion of the
high limb); half types are widened to float32 first (exactly).
"""

from __future__ import annotations

import sys

import numpy as np

from . import ops

ZERO = np.iinfo(np.int16).min       # the exponent of 0: below every finite one
SPECIAL = np.iinfo(np.int16).max    # the exponent of inf and NaN: above every finite one
FRACTION = 62                       # bits of the grid below the shared exponent
LIMB = 31                           # bits of the low limb
_LOW = (1 << LIMB) - 1
_NAN = 1 << 32                      # a NaN's count in the low limb


def _xp(x):
    """The array module of ``x``: numpy, or cupy for a cupy array."""
    return np if isinstance(x, np.ndarray) else sys.modules["cupy"]


def _wide(x):
    """x's values as a float64 array (exact for every float dtype)."""
    return x.astype(np.float32 if x.dtype in ops.HALF else x.dtype).astype(np.float64)


def reduction(x, divisor: int = 1):
    """Generator: the phases of a reproducible sum of flat float array ``x`` (divided by
    ``divisor`` for avg). Yields ``(contribution, op)`` for each allreduce, is sent its
    result (on every rank alike), returns the sum as an array of x's dtype."""
    shared = yield exponents(x), "max"
    total = yield limbs(x, shared), "sum"
    return decode(total, shared, x.dtype, divisor)


def exponents(x):
    """Phase 1's contribution: per element of float array ``x`` (flat) the int16 ``e`` with
    ``|x| < 2**e``; :data:`ZERO` for 0, :data:`SPECIAL` for inf and NaN."""
    xp = _xp(x)
    w = _wide(x)
    finite = xp.isfinite(w)
    _, e = xp.frexp(xp.where(finite, w, 0))
    e = e.astype(np.int16)
    e[w == 0] = ZERO
    e[~finite] = SPECIAL
    return e


def limbs(x, shared):
    """Phase 2's contribution: the (2, x.size) int64 limbs of ``x`` (flat) against the
    ``shared`` exponents (phase 1's max); counts where an element is :data:`SPECIAL`."""
    xp = _xp(x)
    w = _wide(x)
    special = shared == SPECIAL
    scale = FRACTION - shared.astype(np.int32)
    scale[special | (shared == ZERO)] = 0
    v = xp.rint(xp.ldexp(xp.where(special, 0, w), scale)).astype(np.int64)
    out = xp.empty((2, x.size), np.int64)
    xp.right_shift(v, LIMB, out=out[0])
    xp.bitwise_and(v, _LOW, out=out[1])
    if special.any():
        out[0][special] = w[special] == np.inf
        out[1][special] = (w[special] == -np.inf) + xp.isnan(w[special]) * _NAN
    return out


def decode(total, shared, dtype, divisor: int = 1):
    """The sum (divided by ``divisor`` for avg) of the contributions whose limbs summed to
    ``total`` against ``shared``, as a flat array of ``dtype``."""
    xp = _xp(total)
    hi = total[0] + (total[1] >> LIMB)
    lo = total[1] & _LOW
    e = shared.astype(np.int32)
    e[shared == ZERO] = 0
    with np.errstate(over="ignore", invalid="ignore"):
        value = xp.ldexp(hi.astype(np.float64), e - (FRACTION - LIMB)) + \
            xp.ldexp(lo.astype(np.float64), e - FRACTION)
        if divisor != 1:
            value /= divisor
        special = shared == SPECIAL
        if special.any():
            pos, neg, nan = total[0][special], total[1][special] & (_NAN - 1), \
                total[1][special] >> 32
            value[special] = xp.where((nan > 0) | ((pos > 0) & (neg > 0)), np.nan,
                                      xp.where(pos > 0, np.inf, -np.inf))
        return value.astype(dtype)
