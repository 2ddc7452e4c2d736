"""pyar.kernels.reduce_into: every op and dtype, in place, integers wrapping, NaN propagating."""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from pyar.kernels import OPS, reduce_into
from pyar.ops import DTYPES

REFERENCE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


@given(data=st.data(), dtype=st.sampled_from(DTYPES), op=st.sampled_from(OPS),
       n=st.sampled_from([0, 1, 7, 1000]))
def test_matches_numpy_in_place(data, dtype, op, n):
    dst = data.draw(hnp.arrays(dtype, n))
    src = data.draw(hnp.arrays(dtype, n))
    with np.errstate(all="ignore"):
        expected = REFERENCE[op](dst, src)
        before = dst
        reduce_into(dst, src, op)
    assert dst is before
    np.testing.assert_array_equal(dst, expected)


def test_integers_wrap_like_c():
    dst = np.array([127, -128], np.int8)
    reduce_into(dst, np.array([1, -1], np.int8), "sum")
    assert dst.tolist() == [-128, 127]
    dst = np.array([2**31], np.uint32)
    reduce_into(dst, np.array([2], np.uint32), "prod")
    assert dst.tolist() == [0]


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_propagate_nan(op):
    dst = np.array([np.nan, 1.0, 2.0], np.float32)
    reduce_into(dst, np.array([1.0, np.nan, 3.0], np.float32), op)
    assert np.isnan(dst[:2]).all() and dst[2] == (3.0 if op == "max" else 2.0)


def test_unknown_op():
    with pytest.raises(ValueError, match="op must be one of"):
        reduce_into(np.ones(1), np.ones(1), "avg")


def test_kernels_never_import_the_rest_of_pyar():
    import pathlib

    import pyar.kernels
    source = pathlib.Path(pyar.kernels.__file__).read_text()
    assert "import pyar" not in source and "from pyar" not in source and "from .." not in source


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op, zero", [("max", "+"), ("min", "-")])
def test_max_and_min_are_commutative_bit_for_bit_on_signed_zeros(dtype, op, zero):
    a = np.array([-0.0, 0.0, -0.0, 0.0, 1.0, -2.0], dtype)
    b = np.array([0.0, -0.0, -0.0, 0.0, 1.0, 3.0], dtype)
    ab, ba = a.copy(), b.copy()
    reduce_into(ab, b, op)
    reduce_into(ba, a, op)
    assert ab.tobytes() == ba.tobytes()
    assert np.signbit(ab[:2]).tolist() == [zero == "-"] * 2
    assert np.signbit(ab[2:4]).tolist() == [True, False]     # equal zeros keep their sign
    assert ab[4:].tolist() == ([1.0, 3.0] if op == "max" else [1.0, -2.0])
