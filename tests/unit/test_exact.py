"""pyar.core.exact, the reproducible sum, in one process: the phases of n ranks played out
on a list of contributions (the max and the integer sum an allreduce computes), against the
exact sum of the inputs (fractions)."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

from pyar.core import exact

DTYPES = [np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16),
          np.dtype(ml_dtypes.bfloat16)]


def reproducible(contributions, divisor=1):
    """What every rank gets: the phases of exact.reduction, each reduced over the ranks."""
    phases = [exact.reduction(x, divisor) for x in contributions]
    asked = [next(p) for p in phases]
    try:
        while True:
            values = [a for a, _ in asked]
            total = np.max(values, axis=0) if asked[0][1] == "max" else np.sum(values, axis=0)
            asked = [p.send(total.copy()) for p in phases]
    except StopIteration as done:
        return done.value


def vectors(dtype, n, count, seed):
    rng = np.random.default_rng(seed)
    scale = 2.0 ** rng.integers(-30, 30, (n, count)) if dtype.itemsize > 2 else \
        2.0 ** rng.integers(-6, 6, (n, count))
    return list((rng.standard_normal((n, count)) * scale).astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(n=st.integers(1, 9), count=st.integers(0, 40), seed=st.integers(0, 2 ** 32 - 1),
       data=st.data())
def test_the_same_bits_in_any_order_and_with_zeros_from_other_ranks(dtype, n, count, seed,
                                                                    data):
    xs = vectors(dtype, n, count, seed)
    first = reproducible(xs)
    assert first.dtype == dtype and first.shape == (count,)
    order = data.draw(st.permutations(range(n)))
    zeros = [np.zeros(count, dtype)] * data.draw(st.integers(0, 3))
    again = reproducible([xs[i] for i in order] + zeros)
    assert again.tobytes() == first.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(n=st.integers(1, 9), count=st.integers(1, 30), seed=st.integers(0, 2 ** 32 - 1),
       avg=st.booleans())
def test_the_error_against_the_exact_sum_is_within_the_stated_bound(dtype, n, count, seed,
                                                                    avg):
    xs = vectors(dtype, n, count, seed)
    got = reproducible(xs, n if avg else 1)
    wide = [x.astype(np.float64) for x in xs]
    for i in range(count):
        exact_sum = sum(Fraction(float(w[i])) for w in wide) / (n if avg else 1)
        top = max(abs(float(w[i])) for w in wide)
        E = int(np.frexp(top)[1]) if top else 0
        value = float(got[i].astype(np.float64))
        ulp = float(np.spacing(np.abs(got[i].astype(np.float32 if dtype.itemsize <= 4 else
                                                     np.float64))))
        if dtype.itemsize == 2:
            ulp = float(np.spacing(np.abs(got[i])).astype(np.float64))
        grid = Fraction(n, 2 ** (63 - E)) / (n if avg else 1)   # n 2**(E - 63), per rank
        bound = grid + Fraction(ulp) / 2 + Fraction(abs(value)) * Fraction(1, 2 ** 52)
        assert abs(Fraction(value) - exact_sum) <= bound, (i, value, float(exact_sum))


def test_sums_whose_float_order_matters_come_out_of_the_exact_sum():
    """1 + 2**-60 - 1 is 0 in float64 left to right, 2**-60 exactly: the grid keeps it."""
    xs = [np.array([1.0]), np.array([2.0 ** -60]), np.array([-1.0])]
    assert (xs[0] + xs[1]) + xs[2] == 0
    assert reproducible(xs)[0] == 2.0 ** -60
    big = [np.array([6e4], np.float16), np.array([6e4], np.float16), np.array([-6e4],
                                                                                np.float16)]
    assert reproducible(big)[0] == np.float16(6e4)     # (float16's partial sum would be inf)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_infinities_and_nans_combine_as_ieee_says(dtype):
    inf, nan = np.inf, np.nan
    cases = [([inf, 1], inf), ([-inf, 1], -inf), ([inf, inf], inf), ([inf, -inf], nan),
             ([nan, 1], nan), ([nan, inf], nan), ([0.0, -0.0], 0.0), ([-0.0, -0.0], 0.0)]
    for values, want in cases:
        got = reproducible([np.array([v], dtype) for v in values])[0]
        if np.isnan(want):
            assert np.isnan(got), (values, got)
        else:
            assert got == want and (want != 0 or not np.signbit(got)), (values, got)


def test_the_limbs_hold_a_sum_of_many_ranks_exactly():
    """The largest inputs of 2**20 ranks: their limbs' sums stay within int64."""
    x = np.array([np.finfo(np.float64).max / 2 ** 21, -1.5], np.float64)
    shared = exact.exponents(x)
    total = exact.limbs(x, shared) * (1 << 20)
    got = exact.decode(total, shared, x.dtype)
    assert got[0] == x[0] * 2 ** 20 and got[1] == -1.5 * 2 ** 20
