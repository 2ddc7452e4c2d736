"""Host kernels of reproducible sums (float32 and float64; the phases and their contract:
:mod:`pyar.core.exact`): one pass each, compiled by Numba and cached on disk as
:mod:`.host`'s are.

Per element ``x`` with the shared exponent ``E`` (``|x| < 2**E`` on every rank): the
integer ``v = rint(x * 2**(FRACTION - E))`` as the limbs ``v = hi * 2**LIMB + lo``,
``0 <= lo < 2**LIMB``; decoded as ``hi * 2**(E - FRACTION + LIMB) + lo * 2**(E - FRACTION)``
in float64 once the carry of the summed ``lo`` is propagated.
"""

import math

import numpy as np
from numba import njit

from ._cache import serialise

ZERO = -(1 << 15)               # the exponent of 0: below every finite one (int16's least)
SPECIAL = (1 << 15) - 1         # the exponent of inf and NaN: above every finite one
FRACTION = 62                   # bits of the grid below the shared exponent
LIMB = 31                       # bits of the low limb
LOW = (1 << LIMB) - 1
NAN = 1 << 32                   # a NaN's count in the low limb (-inf's: below it)
_LEAST = -1074                  # 2**k for k in [_LEAST, 1023] is a float64: a table lookup
_POW2 = np.ldexp(1.0, np.arange(_LEAST, 1024))      # (math.ldexp costs ~10 ns a call)


@njit(inline="always")
def _scaled(v, k):
    """``v * 2**k`` (math.ldexp): a product by a power of two from the table where it is one."""
    if _LEAST <= k <= 1023:
        return v * _POW2[k - _LEAST]
    return math.ldexp(v, k)


@njit(cache=True, nogil=True)
def exponents(e, x, bits, mantissa, field):
    """``e[i]``: the exponent of ``x[i]`` (``|x| < 2**e``), ZERO for 0, SPECIAL if not finite;
    read from its ``bits`` (x viewed as integers): ``mantissa`` bits below the exponent
    field, whose all-ones value is ``field`` (subnormals through math.frexp)."""
    for i in range(x.size):
        biased = (bits[i] >> mantissa) & field
        if biased == field:
            e[i] = SPECIAL
        elif biased == 0:
            e[i] = ZERO if x[i] == 0 else math.frexp(np.float64(x[i]))[1]
        else:
            e[i] = biased - (field >> 1) + 1


@njit(cache=True, nogil=True)
def limbs(hi, lo, x, shared):
    """The limbs of ``x`` against ``shared``; where it is SPECIAL, counts: +inf in ``hi``,
    -inf and NaN (times NAN) in ``lo``."""
    for i in range(x.size):
        v = np.float64(x[i])
        E = shared[i]
        if E == SPECIAL:
            hi[i] = 1 if v == math.inf else 0
            lo[i] = (1 if v == -math.inf else 0) + (NAN if v != v else 0)
        elif E == ZERO:
            hi[i] = 0
            lo[i] = 0
        else:
            q = np.int64(np.rint(_scaled(v, FRACTION - E)))
            hi[i] = q >> LIMB
            lo[i] = q & LOW


@njit(cache=True, nogil=True)
def decode(out, hi, lo, shared, divisor):
    """``out[i]``: the value of the summed limbs ``hi[i], lo[i]`` (divided by ``divisor``),
    rounded to out's dtype; where SPECIAL, NaN if a NaN or both infinities were counted, else
    the infinity."""
    for i in range(out.size):
        E = shared[i]
        if E == SPECIAL:
            pos, neg, nan = hi[i], lo[i] & (NAN - 1), lo[i] >> 32
            value = math.nan if nan > 0 or (pos > 0 and neg > 0) else \
                (math.inf if pos > 0 else -math.inf)
        elif E == ZERO:
            value = 0.0
        else:
            carried = hi[i] + (lo[i] >> LIMB)
            value = _scaled(np.float64(carried), E - FRACTION + LIMB) + \
                _scaled(np.float64(lo[i] & LOW), E - FRACTION)
            if divisor != 1:
                value /= divisor
        out[i] = value


KERNELS = tuple(map(serialise, (exponents, limbs, decode)))
exponents, limbs, decode = KERNELS
