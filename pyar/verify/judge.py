"""What ``pyar verify`` accepts as a collective's result: an exact reference and rigorous bounds.

An allreduce's elements are judged as below; a reduce_scatter's block, element by element,
the same way (each block has one owner: no rule across ranks); an allgather's result must
be every rank's x, concatenated in rank order, bit for bit (:func:`not_gathered`).

- Integers: exact, wrapping as C's unsigned (and two's complement) arithmetic does; sum
  and prod wrap the same in any order, so there is one right answer.
- max, min: exact, under one of two rules for floats (:data:`NAN_RULES`). ``propagate``
  (the default, pyar's rule, stricter than MPI's): a NaN anywhere gives NaN, and every rank
  holds the same bits. ``mpi`` (MPI_MAX and MPI_MIN are C comparisons, which the standard
  leaves undefined for NaN): where a NaN meets numbers the result is NaN or one of those
  numbers, and there, and where zeros of both signs meet, ranks may differ. Under both a
  zero result may be a zero of either sign when zeros of both signs meet (``-0.0 == 0.0``).
- Float sum: any summation order of ``N`` terms (each rounded to the dtype, ``u`` its unit
  roundoff, ``eps / 2``) is within ``gamma(N-1) * sum|x_i|`` of the exact sum, where
  ``gamma(k) = k*u / (1 - k*u)`` (Higham, Accuracy and Stability, 2nd ed., eq. 4.4). The
  exact sum is taken in double-double (float64 inputs) or float64 (the narrower types, its
  own error added to the bound). A result of +-inf is accepted where the accumulator could
  overflow: where the positive (negative) terms, grown by ``gamma(N)``, reach its overflow
  threshold (``max`` + half an ulp), NaN where both could; an inputs' inf or NaN gives the
  IEEE result. float32 and float64 accumulate in their own type; float16 and bfloat16 must
  accumulate in float32 (as :data:`ACCUMULATOR` says), so for them +-inf is accepted where
  float32 partial sums could overflow or the exact result, within float32's error, reaches
  the half type's threshold: partial sums kept in the half type overflow where the exact
  result is finite, and are caught; the error bound of a finite result stays the half
  type's (any order).
- avg: the sum as above divided by ``N``, or each term divided first: within
  ``(gamma(N) * sum|x_i| + u * |S|) / N`` plus ``N`` of the smallest subnormal; +-inf
  as for the sum (a sum taken before the division may overflow its accumulator).
- Float prod: within ``gamma(N-1) * |P|`` of the exact product (twice that for float64,
  whose reference is itself a float64 product), inf accepted when the magnitudes above 1
  could overflow the dtype in some order.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .cases import FLOATS

NAN_RULES = ("propagate", "mpi")        # float max/min: see the module's docstring
ACCUMULATOR = {"float16": np.float32, "bfloat16": np.float32}   # else the dtype itself


def _twosum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def wrong(result: np.ndarray, inputs: list, op: str, dtype_name: str,
          nan: str = "propagate") -> np.ndarray:
    """Flat indices where ``result`` (any shape) is not an allowed allreduce of ``inputs``
    (flat arrays, one per rank, of the result's dtype); ``nan``: the rule for float max and
    min (:data:`NAN_RULES`)."""
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
            if nan == "mpi":                    # NaN or any number it met
                ok |= meets_nan(x) & (np.isnan(r) | (x == r).any(axis=0))
        return np.flatnonzero(~ok)
    info = ml_dtypes.finfo(dtype)
    u = float(info.eps) / 2
    top = _threshold(info)
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
            wide = ml_dtypes.finfo(ACCUMULATOR.get(dtype_name, dtype))
            grow = 1 + _gamma(size, float(wide.eps) / 2)    # partial sums may round up
            plus, minus = plus * grow, minus * grow
            may_pos, may_neg = plus >= _threshold(wide), minus >= _threshold(wide)
            reference_error = (_gamma(size, 2.0 ** -53) if dtype.itemsize < 8 else 2.0 ** -100) \
                * magnitude
            if op == "sum":
                bound = _gamma(size - 1, u) * magnitude
            else:
                exact, err = exact / size, err / size
                bound = (_gamma(size, u) * magnitude + u * np.abs(exact)) / size + size * tiny
            if wide.dtype != dtype:             # the exact result rounds to +-inf at the end
                reach = _gamma(size, float(wide.eps) / 2) * magnitude + reference_error
                if op == "avg":
                    reach = reach / size
                may_pos |= exact + err + reach >= top
                may_neg |= -(exact + err) + reach >= top
            bound = bound + reference_error
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


def not_gathered(result: np.ndarray, inputs: list) -> np.ndarray:
    """Flat indices where ``result`` (flat) does not hold the bits of ``inputs`` (flat arrays,
    one per rank, of the result's dtype) concatenated in rank order."""
    expected = np.concatenate(inputs) if inputs else result[:0]
    bits = f"u{result.dtype.itemsize}"
    return np.flatnonzero(result.view(bits) != expected.view(bits))


def describe_gathered(result, inputs, bad, limit: int = 3) -> str:
    """Which elements of a gathered ``result`` are wrong: the rank and element each should
    hold, and what it holds."""
    count = inputs[0].size
    shown = [f"[{i}] got {_item(result[i])!r}, rank {i // count}'s element {i % count} is "
             f"{_item(inputs[i // count][i % count])!r}" for i in bad[:limit]]
    return f"{len(bad)} of {result.size} elements wrong: " + "; ".join(shown)


def meets_nan(x: np.ndarray) -> np.ndarray:
    """Per element of ``x`` (ranks by elements, float64), whether a NaN meets a number there."""
    nans = np.isnan(x)
    return nans.any(axis=0) & ~nans.all(axis=0)


def _threshold(info) -> float:
    """The smallest real that rounds to inf in ``info``'s type (``max`` + half an ulp; for
    float64, whose half ulp float64 cannot add, ``max``)."""
    half_ulp = float(info.eps) * 2.0 ** (info.maxexp - 2) if info.dtype.itemsize < 8 else 0.0
    return float(info.max) + half_ulp


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


def broken_rule(result, inputs, bad, op: str, dtype_name: str, nan: str) -> str:
    """Which rule the wrong elements ``bad`` break, and how to choose the other where there
    is one: NaN in float max/min (the ``nan`` rule), a half type's sum overflowing where the
    exact result is finite; "" for plain wrong values."""
    if dtype_name not in FLOATS or not len(bad):
        return ""
    x = np.stack(inputs)[:, bad].astype(np.float64)
    r = np.asarray(result).reshape(-1)[bad].astype(np.float64)
    if op in ("max", "min") and meets_nan(x).any():
        if nan == "propagate":
            return (f"{op} must propagate NaN (--nan propagate, the default: stricter than MPI, "
                    f"which leaves MPI_MAX/MPI_MIN undefined for NaN); --nan mpi accepts NaN or "
                    f"any number it met there, and ranks that differ there")
        return (f"under --nan mpi, where a NaN meets numbers the {op} is NaN or one of them "
                f"(--nan propagate, the default, requires NaN)")
    if dtype_name in ACCUMULATOR and op in ("sum", "avg") \
            and (np.isinf(r) & np.isfinite(x).all(axis=0)).any():
        return (f"inf where the exact {op} is finite: partial sums overflowed {dtype_name}; "
                f"{dtype_name} must be accumulated in float32")
    return ""


def _item(v):
    v = np.asarray(v)
    return float(v) if v.dtype.kind in "fV" else int(v)
