"""What ``pyar verify`` accepts as an allreduce's result: an exact reference and rigorous bounds.

- Integers: exact, wrapping as C's unsigned (and two's complement) arithmetic does; sum
  and prod wrap the same in any order, so there is one right answer.
- max, min: exact. NaN propagates (a NaN anywhere gives NaN); a zero result may be a zero
  of either sign when zeros of both signs meet (numpy's rule: ``-0.0 == 0.0``), but every
  rank must hold the same bits (checked apart, on every case).
- Float sum: any summation order of ``N`` terms (each rounded to the dtype, ``u`` its unit
  roundoff, ``eps / 2``) is within ``gamma(N-1) * sum|x_i|`` of the exact sum, where
  ``gamma(k) = k*u / (1 - k*u)`` (Higham, Accuracy and Stability, 2nd ed., eq. 4.4). The
  exact sum is taken in double-double (float64 inputs) or float64 (the narrower types, its
  own error added to the bound). A result of +-inf is accepted when the positive (negative)
  terms, grown by ``gamma(N)``, reach the overflow threshold (``max`` + half an ulp), NaN when both could; an inputs'
  inf or NaN gives the IEEE result. So an honest float16 sum that overflows is no false
  alarm, and float32 accumulated in float16 is caught.
- avg: the sum as above divided by ``N``, or each term divided first: within
  ``(gamma(N) * sum|x_i| + u * |S|) / N`` plus ``N`` of the smallest subnormal; +-inf
  as for the sum (a sum taken before the division may overflow).
- Float prod: within ``gamma(N-1) * |P|`` of the exact product (twice that for float64,
  whose reference is itself a float64 product), inf accepted when the magnitudes above 1
  could overflow in some order.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .cases import FLOATS


def _twosum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def wrong(result: np.ndarray, inputs: list, op: str, dtype_name: str) -> np.ndarray:
    """Flat indices where ``result`` (any shape) is not an allowed allreduce of ``inputs``
    (flat arrays, one per rank, of the result's dtype)."""
    result = np.asarray(result).reshape(-1)
    dtype = result.dtype
    stack = np.stack(inputs) if inputs[0].size else np.zeros((len(inputs), 0), dtype)
    size = len(inputs)
    if dtype_name not in FLOATS:
        ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
        expected = ufunc.reduce(stack, axis=0, dtype=dtype)
        return np.flatnonzero(result != expected)
    x = stack.astype(np.float64)
    r = result.astype(np.float64)
    if op in ("max", "min"):
        with np.errstate(invalid="ignore"):
            expected = (np.maximum if op == "max" else np.minimum).reduce(x, axis=0)
            ok = (r == expected) | (np.isnan(r) & np.isnan(expected))
        return np.flatnonzero(~ok)
    info = ml_dtypes.finfo(dtype)
    u = float(info.eps) / 2
    top = float(info.max) + (float(info.eps) * 2.0 ** (info.maxexp - 2) if dtype.itemsize < 8
                             else 0.0)          # reals at or beyond this round to inf
    tiny = float(info.smallest_subnormal)
    nan_in = np.isnan(x).any(axis=0)
    pos_inf, neg_inf = (x == np.inf).any(axis=0), (x == -np.inf).any(axis=0)
    finite = np.where(np.isfinite(x), x, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        if op in ("sum", "avg"):
            exact, err = finite[0].copy(), np.zeros_like(finite[0])
            for row in finite[1:]:
                exact, e = _twosum(exact, row)
                err += e
            magnitude = np.abs(finite).sum(axis=0)
            plus = np.where(finite > 0, finite, 0).sum(axis=0)
            minus = -np.where(finite < 0, finite, 0).sum(axis=0)
            grow = 1 + _gamma(size, u)        # partial sums may round up on the way
            plus, minus = plus * grow, minus * grow
            may_pos, may_neg = plus >= top, minus >= top
            if op == "sum":
                bound = _gamma(size - 1, u) * magnitude
            else:
                exact, err = exact / size, err / size
                bound = (_gamma(size, u) * magnitude + u * np.abs(exact)) / size + size * tiny
            if dtype.itemsize < 8:
                bound = bound + _gamma(size, 2.0 ** -53) * magnitude
            else:
                bound = bound + 2.0 ** -100 * magnitude
            diff = np.abs((r - exact) - err)
            ieee_nan = nan_in | (pos_inf & neg_inf)
            ieee_inf = np.where(pos_inf, np.inf, np.where(neg_inf, -np.inf, 0.0))
        else:                                # prod
            exact = np.multiply.reduce(finite, axis=0)
            bound = _gamma(size - 1, u) * np.abs(exact) * (2 if dtype.itemsize == 8 else 1)
            bound = bound + _gamma(size, 2.0 ** -53) * np.abs(exact) + size * tiny
            big = np.multiply.reduce(np.where(np.abs(finite) > 1, np.abs(finite), 1), axis=0)
            big = big * (1 + _gamma(size, u))
            negative = (np.signbit(x).sum(axis=0) % 2) == 1
            zero = (x == 0).any(axis=0)
            infinite = pos_inf | neg_inf
            may_pos = (big >= top) & ~negative
            may_neg = (big >= top) & negative
            diff = np.abs(r - exact)
            ieee_nan = nan_in | (zero & infinite)
            ieee_inf = np.where(infinite & ~ieee_nan, np.where(negative, -np.inf, np.inf), 0.0)
        special = ieee_nan | (ieee_inf != 0)
        close = diff <= bound
        overflowed = ((r == np.inf) & may_pos) | ((r == -np.inf) & may_neg) | \
            (np.isnan(r) & may_pos & may_neg)
        ok_special = np.where(ieee_nan, np.isnan(r), r == ieee_inf)
        ok = np.where(special, ok_special, (close & np.isfinite(r)) | overflowed)
    return np.flatnonzero(~ok)


def _gamma(k: int, u: float) -> float:
    return k * u / (1 - k * u) if k > 0 else 0.0


def describe(result, inputs, bad, limit: int = 3) -> str:
    """Which elements are wrong, with what each rank contributed to the first of them."""
    result = np.asarray(result).reshape(-1)
    shown = []
    for i in bad[:limit]:
        parts = ", ".join(repr(_item(x[i])) for x in inputs)
        shown.append(f"[{i}] got {_item(result[i])!r} from ({parts})")
    return f"{len(bad)} of {result.size} elements wrong: " + "; ".join(shown)


def _item(v):
    v = np.asarray(v)
    return float(v) if v.dtype.kind in "fV" else int(v)
