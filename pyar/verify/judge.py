"""What ``pyar verify`` accepts as a collective's result: an exact reference and rigorous bounds.

An allreduce's elements are judged as below; a reduce_scatter's block, element by element,
the same way (each block has one owner: no rule across ranks); an allgather's result must
be every rank's x, concatenated in rank order, bit for bit (:func:`not_gathered`).

- Integers: exact, wrapping as C's unsigned (and two's complement) arithmetic does; sum
  and prod wrap the same in any order, so there is one right answer. That is pyar's rule
  for every integer type (``--int-overflow wrap``, the default); under ``any``
  (:data:`INT_OVERFLOW_RULES`), C's, signed overflow is undefined: an element of a signed
  sum or prod that overflows in some order (:func:`may_overflow`) may hold any value, while
  unsigned ones must still wrap. :func:`integer_arithmetic` says what wrong elements did
  (saturate, or other).
- Every rank's result holds the same bits, but under ``--nan mpi`` (MPI defines no NaN
  payload) ranks may differ where every rank holds a NaN (:func:`disagreement` classes a
  difference: NaN payload, sign of zero, numeric).
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

import itertools

import ml_dtypes
import numpy as np

from .cases import FLOATS

NAN_RULES = ("propagate", "mpi")        # float max/min: see the module's docstring
INT_OVERFLOW_RULES = ("wrap", "any")    # integer sum/prod overflow: the same
DIFFERENCES = ("NaN payload", "sign of zero", "numeric")   # :func:`disagreement`'s classes
ACCUMULATOR = {"float16": np.float32, "bfloat16": np.float32}   # else the dtype itself


def _twosum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def wrong(result: np.ndarray, inputs: list, op: str, dtype_name: str,
          nan: str = "propagate", int_overflow: str = "wrap") -> np.ndarray:
    """Flat indices where ``result`` (any shape) is not an allowed allreduce of ``inputs``
    (flat arrays, one per rank, of the result's dtype); ``nan``: the rule for float max and
    min (:data:`NAN_RULES`); ``int_overflow``: the rule for integer sum and prod
    (:data:`INT_OVERFLOW_RULES`)."""
    result = np.asarray(result).reshape(-1)
    dtype = result.dtype
    stack = np.stack(inputs) if inputs[0].size else np.zeros((len(inputs), 0), dtype)
    size = len(inputs)
    if dtype_name not in FLOATS:
        ok = result == wrapped(stack, op)
        if int_overflow == "any" and dtype.kind == "i" and op in ("sum", "prod"):
            ok |= may_overflow(stack, op)
        return np.flatnonzero(~ok)
    x = stack.astype(np.float64)
    r = result.astype(np.float64)
    if op in ("max", "min"):
        with np.errstate(invalid="ignore"):
            expected = (np.maximum if op == "max" else np.minimum).reduce(x, axis=0)
            ok = (r == expected) | (np.isnan(r) & np.isnan(expected))
            if nan == "mpi":                    # NaN or any number it met
                ok |= meets_nan(x) & (np.isnan(r) | (x == r).any(axis=0))
        return np.flatnonzero(~ok)
    with np.errstate(invalid="ignore", over="ignore"):
        exact, err, bound, may_pos, may_neg, ieee_nan, ieee_inf = _float_bounds(
            x, op, dtype, dtype_name)
        diff = np.abs((r - exact) - err)
        special = ieee_nan | (ieee_inf != 0)
        close = diff <= bound
        overflowed = ((r == np.inf) & may_pos) | ((r == -np.inf) & may_neg) | \
            (np.isnan(r) & may_pos & may_neg)
        ok_special = np.where(ieee_nan, np.isnan(r), r == ieee_inf)
        ok = np.where(special, ok_special, (close & np.isfinite(r)) | overflowed)
    return np.flatnonzero(~ok)


def expectation(inputs: list, op: str, dtype_name: str, nan: str = "propagate",
                int_overflow: str = "wrap") -> tuple:
    """What :func:`wrong` accepts, as (expected, tolerance) per element, for a check that
    needs no pyar (:mod:`pyar.verify.standalone`): a result ``r`` passes where ``|r -
    expected| <= tolerance`` (NaN matching NaN), tolerance 0 for exact results; ``inf``
    where the rules accept more than one kind of result (an overflow to +-inf in some
    order, a number where a NaN meets numbers under ``--nan mpi``, a signed overflow under
    ``--int-overflow any``). Expected values are integers of the dtype, or float64."""
    stack = np.stack(inputs) if inputs[0].size else np.zeros((len(inputs), 0), inputs[0].dtype)
    if dtype_name not in FLOATS:
        tolerance = np.zeros(stack.shape[1])
        if int_overflow == "any" and stack.dtype.kind == "i" and op in ("sum", "prod"):
            tolerance[may_overflow(stack, op)] = np.inf
        return wrapped(stack, op), tolerance
    x = stack.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if op in ("max", "min"):
            expected = (np.maximum if op == "max" else np.minimum).reduce(x, axis=0)
            tolerance = np.where(meets_nan(x) & (nan == "mpi"), np.inf, 0.0)
            return expected, tolerance
        exact, err, bound, may_pos, may_neg, ieee_nan, ieee_inf = _float_bounds(
            x, op, stack.dtype, dtype_name)
        special = ieee_nan | (ieee_inf != 0)
        expected = np.where(ieee_nan, np.nan, np.where(special, ieee_inf, exact + err))
        tolerance = np.where(special, 0.0, np.where(may_pos | may_neg, np.inf, bound))
    return expected, tolerance


def _float_bounds(x: np.ndarray, op: str, dtype, dtype_name: str) -> tuple:
    """For a float sum, avg or prod of ``x`` (ranks by elements, float64) in ``dtype``: the
    exact result as ``exact + err`` (double-double; err 0 for prod), the error ``bound`` a
    finite result may have, where +inf and -inf may be right (``may_pos``, ``may_neg``: an
    overflow in some order), and the IEEE result of the inputs' inf and NaN (``ieee_nan``,
    ``ieee_inf``, 0 where none)."""
    size = len(x)
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
            err = np.zeros_like(exact)
            ieee_nan = nan_in | (zero & infinite)
            ieee_inf = np.where(infinite & ~ieee_nan, np.where(negative, -np.inf, np.inf), 0.0)
    return exact, err, bound, may_pos, may_neg, ieee_nan, ieee_inf


def wrapped(stack: np.ndarray, op: str) -> np.ndarray:
    """The integer reduction of ``stack`` (ranks by elements) over its ranks, wrapping as C's
    unsigned arithmetic does."""
    ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    return ufunc.reduce(stack, axis=0, dtype=stack.dtype)


def _exact(stack: np.ndarray, op: str) -> np.ndarray:
    """The exact integer sum or product of ``stack``'s ranks per element, unbounded: int64
    or float64 where they hold it (every sum of fewer than 2**31 ranks of a type narrower
    than 64 bits; every product below 2**53, and the sign and side of any larger one),
    Python ints for 64-bit types."""
    if stack.dtype.itemsize == 8:
        return (np.add if op == "sum" else np.multiply).reduce(stack.astype(object), axis=0)
    if op == "sum":
        return stack.astype(np.int64).sum(axis=0)
    return np.multiply.reduce(stack.astype(np.float64), axis=0)


def may_overflow(stack: np.ndarray, op: str) -> np.ndarray:
    """Per element, whether an integer sum or prod of ``stack``'s ranks (ranks by elements)
    leaves its dtype in some order of the terms: a sum where its positive (negative) terms
    alone pass the largest (smallest) value, a prod where the product of its nonzero
    terms' magnitudes passes the largest value."""
    info = np.iinfo(stack.dtype)
    if op == "sum":
        plus = _exact(np.where(stack > 0, stack, 0).astype(stack.dtype), "sum")
        minus = _exact(np.where(stack < 0, stack, 0).astype(stack.dtype), "sum")
        return np.asarray((plus > info.max) | (minus < info.min), bool)
    if stack.dtype.kind == "i":
        magnitude = np.abs(stack.astype(object if stack.dtype.itemsize == 8 else np.float64))
    else:
        magnitude = stack
    magnitude = np.where(stack == 0, 1, magnitude).astype(magnitude.dtype)
    return np.asarray(_exact(magnitude, "prod") > info.max, bool)


def integer_arithmetic(result, inputs, op: str) -> dict:
    """What an integer sum or prod did where it leaves its dtype (:func:`may_overflow`):
    how many of those elements ``wrap`` (C's unsigned rule), ``saturate`` (a fold whose
    every step is clipped to the dtype's range: in some order of the ranks (every order up
    to 5 ranks; beyond, rank order from each rank, forwards and backwards) or pairwise in
    rank order, as recursive halving folds) or do ``other``; and ``wrong`` elsewhere:
    elements that overflow in no order and are not the exact value. Cost: one vectorized
    fold per order tried, over the overflowing elements."""
    result = np.asarray(result).reshape(-1)
    stack = np.stack(inputs)
    info = np.iinfo(stack.dtype)
    over = may_overflow(stack, op)
    wraps = result == wrapped(stack, op)
    terms = stack[:, over].astype(object if stack.dtype.itemsize == 8 else np.int64)
    got = result[over].astype(terms.dtype)
    fold = np.add if op == "sum" else np.multiply

    def clipped(a, b):
        return np.minimum(np.maximum(fold(a, b), info.min), info.max)

    saturates = np.zeros(got.size, bool)
    for order in _orders(len(inputs)):
        acc = terms[order[0]]
        for r in order[1:]:
            acc = clipped(acc, terms[r])
        saturates |= acc == got
    level = list(terms)
    while len(level) > 1:
        level = [clipped(level[i], level[i + 1]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    saturates |= level[0] == got
    saturates &= ~wraps[over]
    return {"overflowing": int(over.sum()), "wrap": int(wraps[over].sum()),
            "saturate": int(saturates.sum()),
            "other": int((~wraps[over] & ~saturates).sum()),
            "wrong": int((~wraps & ~over).sum())}


def _orders(size: int) -> list:
    """The orders of ``size`` ranks :func:`integer_arithmetic` folds in."""
    if size <= 5:
        return list(itertools.permutations(range(size)))
    forwards = [[(start + k) % size for k in range(size)] for start in range(size)]
    return forwards + [o[::-1] for o in forwards]


def integer_rule(result, inputs, op: str, dtype_name: str, int_overflow: str) -> str:
    """What wrong integer sum or prod elements did, against C's rules and the rule
    ``int_overflow``: "" where none overflows or every one that does wraps, and for a signed
    type under ``any`` (where any result passes)."""
    seen = integer_arithmetic(result, inputs, op)
    if not seen["overflowing"] or seen["wrap"] == seen["overflowing"]:
        return ""
    bits = np.dtype(dtype_name).itemsize * 8
    did = ", ".join(f"{seen[k]} {w}" for k, w in (("saturate", "saturate"), ("wrap", "wrap"),
                                                  ("other", "do neither")) if seen[k])
    n = seen["overflowing"]
    text = (f"of {n} element{'s' * (n != 1)} whose {op} overflows {dtype_name} in some order, "
            f"{did}")
    if dtype_name.startswith("uint"):
        return (f"{text}: C's unsigned arithmetic wraps (modulo 2**{bits}), so "
                f"{'saturating' if seen['saturate'] else 'this'} is a deviation from C under "
                f"either --int-overflow rule")
    if int_overflow == "wrap":
        return (f"{text}: pyar's rule (--int-overflow wrap, the default) wraps; C leaves "
                f"signed overflow undefined: --int-overflow any accepts any result there")
    return ""                           # (any: only elements that overflow nowhere are wrong)


def disagreement(results: list, allowed=None) -> tuple:
    """Where ranks' results (flat arrays of one dtype, one per rank) differ bitwise, and how:
    (flat indices, their classes of :data:`DIFFERENCES`: ``NaN payload`` where every rank
    holds a NaN, ``sign of zero`` where every rank holds a zero, else ``numeric``), leaving
    out the elements ``allowed`` (a bool array) marks."""
    bits = np.stack([np.ascontiguousarray(r).view(f"u{r.dtype.itemsize}") for r in results])
    differ = (bits != bits[0]).any(axis=0)
    if allowed is not None:
        differ &= ~allowed
    where = np.flatnonzero(differ)
    values = np.stack(results)[:, where]
    if values.dtype.kind in "fV":
        v = values.astype(np.float64)
        kinds = np.where(np.isnan(v).all(axis=0), DIFFERENCES[0],
                         np.where((v == 0).all(axis=0), DIFFERENCES[1], DIFFERENCES[2]))
    else:
        kinds = np.full(where.size, DIFFERENCES[2])
    return where, kinds


def describe_disagreement(results: list, where, kinds, limit: int = 3, ranks=None,
                          labels=None) -> str:
    """The elements ``where`` ranks' ``results`` differ (of :func:`disagreement`): how many,
    their classes, and for the first ``limit`` each rank's bits (hex) and value, ranks that
    agree named together (``ranks``: the rank of each result, default its position; or
    ``labels``, a name for each result, where they are not ranks' results)."""
    ranks = list(range(len(results))) if ranks is None else list(ranks)

    def name(agree):            # (positions in results)
        return " = ".join(labels[k] for k in agree) if labels else _ranks([ranks[k] for k in agree])

    n = results[0].size
    counts = {k: int((kinds == k).sum()) for k in DIFFERENCES if (kinds == k).any()}
    how = f"{next(iter(counts))} only" if len(counts) == 1 else ", ".join(
        f"{k} at {c}" for k, c in counts.items())
    width = results[0].dtype.itemsize * 2
    shown = []
    for i in where[:limit]:
        groups = {}
        for k, r in enumerate(results):
            bits = int(np.ascontiguousarray(r[i:i + 1]).view(f"u{r.dtype.itemsize}")[0])
            groups.setdefault((bits, repr(_item(r[i]))), []).append(k)
        shown.append(f"[{i}] " + ", ".join(f"{name(agree)} 0x{bits:0{width}x} ({value})"
                                           for (bits, value), agree in groups.items()))
    subject = "the results" if labels else "ranks' results"
    return (f"{subject} differ bitwise at {where.size} of {n} elements ({how}): "
            + "; ".join(shown))


def _ranks(ranks) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ",".join(map(str, ranks))


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


def broken_rule(result, inputs, bad, op: str, dtype_name: str, nan: str,
                int_overflow: str = "wrap") -> str:
    """Which rule the wrong elements ``bad`` break, and how to choose the other where there
    is one: NaN in float max/min (the ``nan`` rule), a half type's sum overflowing where the
    exact result is finite, an integer sum or prod that overflows (:func:`integer_rule`);
    "" for plain wrong values."""
    if not len(bad):
        return ""
    if dtype_name not in FLOATS:
        return integer_rule(result, inputs, op, dtype_name, int_overflow) \
            if op in ("sum", "prod") else ""
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
