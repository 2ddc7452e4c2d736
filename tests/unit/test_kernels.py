"""pyar.kernels against numpy: every op and dtype on arbitrary bit patterns, every half-precision
bit pattern, commutativity bit for bit, the average's division, errors, and the CUDA kernels
under the simulator (in a subprocess: the simulator is chosen when numba is imported)."""

import os
import pathlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

from pyar.kernels import (DTYPES, HALF, OPS, bound_fold, cast_into, divide_into, folder,
                          reduce_into)

UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
CANONICAL_NAN = {np.dtype(np.float16): 0x7E00, np.dtype(ml_dtypes.bfloat16): 0x7FC0,
                 np.dtype(np.float32): 0x7FC00000, np.dtype(np.float64): 0x7FF8000000000000}
BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def is_float(dtype):
    return dtype.kind == "f" or dtype in HALF


def expected(a, b, op):
    """numpy's ``a op b`` (half types through float32), with the kernels' two refinements:
    zeros of both signs give +0.0 for max and -0.0 for min, and NaNs are canonical."""
    dtype = a.dtype
    wide = np.float32 if dtype in HALF else dtype
    x, y = a.astype(wide), b.astype(wide)
    with np.errstate(all="ignore"):
        r = UFUNCS[op](x, y)
        if not is_float(dtype):
            return r
        if op in ("max", "min"):
            ties = (x == 0) & (y == 0)
            negative = (np.signbit(x) & np.signbit(y)) if op == "max" else (
                np.signbit(x) | np.signbit(y))
            r = np.where(ties, np.where(negative, -0.0, 0.0).astype(wide), r)
        nans = np.isnan(r)
        r = r.astype(dtype)
    r.view(BITS[dtype.itemsize])[nans] = CANONICAL_NAN[dtype]
    return r


def folded(a, b, op):
    dst = a.copy()
    reduce_into(dst, b, op)
    return dst


def same_bits(got, want):
    bits = BITS[got.dtype.itemsize]
    bad = np.flatnonzero(got.view(bits) != want.view(bits))
    return not bad.size, [(int(i), hex(got.view(bits)[i]), hex(want.view(bits)[i]))
                          for i in bad[:5]]


def patterns(dtype, n):
    """``n`` elements of ``dtype`` from any bit patterns: NaNs, infinities, subnormals included."""
    return st.binary(min_size=n * dtype.itemsize, max_size=n * dtype.itemsize).map(
        lambda raw: np.frombuffer(raw, dtype).copy())


@given(data=st.data(), dtype=st.sampled_from(DTYPES), op=st.sampled_from(OPS),
       n=st.sampled_from([0, 1, 7, 100]))
def test_every_op_and_dtype_matches_numpy_on_any_bits(data, dtype, op, n):
    a, b = data.draw(patterns(dtype, n)), data.draw(patterns(dtype, n))
    dst = a.copy()
    before = dst
    reduce_into(dst, b, op)
    assert dst is before
    ok, where = same_bits(dst, expected(a, b, op))
    assert ok, f"{dtype} {op}: {where}"
    ok, where = same_bits(folded(b, a, op), dst)
    assert ok, f"{dtype} {op} is not commutative bit for bit: {where}"


@given(dtype=st.sampled_from(DTYPES), op=st.sampled_from(OPS),
       values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=2,
                       max_size=40))
def test_every_op_and_dtype_on_ordinary_values(dtype, op, values):
    """Values (not bit patterns): many equal and near-equal operands, small integers."""
    with np.errstate(all="ignore"):
        a = np.array(values, np.float64)
        if not is_float(dtype):
            a = np.nan_to_num(a, nan=0, posinf=1, neginf=-1).clip(-1e6, 1e6).round()
        a = a.astype(dtype)
    b = np.roll(a, 1)
    ok, where = same_bits(folded(a, b, op), expected(a, b, op))
    assert ok, f"{dtype} {op}: {where}"


# Partners for the exhaustive half-precision checks: signed zeros, the smallest and largest
# subnormals and normals, one, infinities, quiet and signalling NaNs of both signs, and a few
# ordinary values; each of the 65,536 patterns meets each of them, in both orders.
SPECIAL = {np.dtype(np.float16): [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00,
                                  0xBC00, 0x3555, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00,
                                  0xFE00, 0x7C01, 0x7FFF, 0x4248, 0x0200, 0x5BFF],
           np.dtype(ml_dtypes.bfloat16): [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080,
                                          0x3F80, 0xBF80, 0x3EAB, 0x7F7F, 0xFF7F, 0x7F80,
                                          0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0x7FFF, 0x4049,
                                          0x0040, 0x4B7F]}


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_every_half_bit_pattern(dtype, op):
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    partners = SPECIAL[dtype] + np.random.default_rng(0).integers(0, 1 << 16, 12).tolist()
    a = np.tile(every, len(partners))
    b = np.repeat(np.array(partners, np.uint16), every.size).view(dtype)
    ab = folded(a, b, op)
    ok, where = same_bits(ab, expected(a, b, op))
    assert ok, f"{dtype} {op}: (index, got, expected) {where}"
    ok, where = same_bits(folded(b, a, op), ab)
    assert ok, f"{dtype} {op} is not commutative bit for bit: {where}"


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_every_half_bit_pattern_divided(dtype):
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    for divisor in (1, 2, 3, 5, 7, 8, 257, 1000):
        got = every.copy()
        divide_into(got, got, divisor)
        with np.errstate(all="ignore"):
            want = (every.astype(np.float32) / np.float32(divisor)).astype(dtype)
        want.view(np.uint16)[np.isnan(want)] = CANONICAL_NAN[dtype]
        ok, where = same_bits(got, want)
        assert ok, f"{dtype} / {divisor}: {where}"


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_cast_into_widens_every_half_bit_pattern_as_numpy_does(dtype):
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    got = np.empty(every.size, np.float32)
    cast_into(got, every)
    ok, where = same_bits(got, every.astype(np.float32))    # NaN payloads kept, as numpy
    assert ok, f"{dtype} -> float32: {where}"


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_cast_into_rounds_float32_to_half_as_numpy_does(dtype):
    """Any float32 bits (infinities, NaNs, subnormals, beyond the half type's range) and
    ordinary values over 24 decades, rounded to the half type: numpy's and ml_dtypes' bits,
    canonical NaNs."""
    rng = np.random.default_rng(2)
    ordinary = rng.standard_normal(1 << 16).astype(np.float32) * \
        np.float32(10.0) ** rng.integers(-12, 12, 1 << 16).astype(np.float32)
    halfway = (np.arange(1 << 16, dtype=np.uint32) << 13 | 0x1000).view(np.float32)
    src = np.concatenate([ordinary, rng.integers(0, 1 << 32, 1 << 16, np.uint32).view(
        np.float32), halfway, np.array([0, -0.0, np.inf, -np.inf, np.nan, 65504, 65520,
                                        3.4e38, 1e-45], np.float32)])
    got = np.empty(src.size, dtype)
    cast_into(got, src)
    with np.errstate(all="ignore"):
        want = src.astype(dtype)
    want.view(np.uint16)[np.isnan(want)] = CANONICAL_NAN[dtype]
    ok, where = same_bits(got, want)
    assert ok, f"float32 -> {dtype}: {where}"


@pytest.mark.parametrize("call, error, message", [
    (lambda: cast_into(np.empty(2, np.float64), np.ones(2, np.float16)), TypeError,
     "between float32 and float16 or bfloat16, got ndarray float64 from ndarray float16"),
    (lambda: cast_into(np.empty(2, np.float16), np.ones(2, np.float16)), TypeError,
     "float16 from ndarray float16"),
    (lambda: cast_into(np.empty(3, np.float32), np.ones(2, np.float16)), ValueError,
     r"1-D arrays of one length, got \(3,\) and \(2,\)"),
    (lambda: cast_into(np.empty((2, 2), np.float32), np.ones((2, 2), np.float16)),
     ValueError, "1-D"),
    (lambda: cast_into([1.0], np.ones(1, np.float16)), TypeError, "got list None"),
])
def test_cast_into_refuses_what_it_does_not_convert(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_cast_into_strided_arrays(dtype):
    src = np.arange(20, dtype=np.float32)[::2]
    half = np.zeros(20, dtype)[1::2]
    cast_into(half, src)
    assert same_bits(half, src.astype(dtype))[0]
    back = np.zeros(30, np.float32)[::3]
    cast_into(back, half)
    assert same_bits(back, src)[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_divide_into_is_numpys_division(dtype):
    original = np.random.default_rng(1).standard_normal(1001).astype(dtype)
    src, dst = original.copy(), np.empty_like(original)
    divide_into(dst, src, 7)
    assert dst.tobytes() == np.divide(original, 7).tobytes()
    divide_into(src, src, 3)
    assert src.tobytes() == np.divide(original, 3).tobytes()


def test_divide_into_needs_a_floating_dtype():
    with pytest.raises(TypeError, match="floating dtype, got int32"):
        divide_into(np.ones(3, np.int32), np.ones(3, np.int32), 2)


def test_integers_wrap_like_c():
    dst = np.array([127, -128], np.int8)
    reduce_into(dst, np.array([1, -1], np.int8), "sum")
    assert dst.tolist() == [-128, 127]
    dst = np.array([2**31], np.uint32)
    reduce_into(dst, np.array([2], np.uint32), "prod")
    assert dst.tolist() == [0]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
@pytest.mark.parametrize("op, zero", [("max", "+"), ("min", "-")])
def test_max_and_min_are_commutative_bit_for_bit_on_signed_zeros(dtype, op, zero):
    a = np.array([-0.0, 0.0, -0.0, 0.0, 1.0, -2.0, np.nan], dtype)
    b = np.array([0.0, -0.0, -0.0, 0.0, 1.0, 3.0, 1.0], dtype)
    ab, ba = folded(a, b, op), folded(b, a, op)
    assert ab.tobytes() == ba.tobytes()
    assert np.signbit(ab[:2]).tolist() == [zero == "-"] * 2
    assert np.signbit(ab[2:4]).tolist() == [True, False]     # equal zeros keep their sign
    assert ab[4:6].astype(float).tolist() == ([1.0, 3.0] if op == "max" else [1.0, -2.0])
    assert np.isnan(ab[6])


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_nans_of_different_payloads_give_the_same_bits_in_either_order(dtype):
    bits = BITS[np.dtype(dtype).itemsize]
    a = np.full(4, np.nan, dtype)
    b = a.copy()
    a.view(bits)[:] |= 1                                   # another payload
    b.view(bits)[:] |= bits(1) << bits(8 * np.dtype(dtype).itemsize - 1)   # negative NaN
    for op in OPS:
        assert folded(a, b, op).tobytes() == folded(b, a, op).tobytes()


@pytest.mark.parametrize("call, error, message", [
    (lambda: reduce_into(np.ones(1), np.ones(1), "avg"), ValueError, "op must be one of"),
    (lambda: reduce_into(np.ones(2), np.ones(3), "sum"), ValueError, "one dtype and length"),
    (lambda: reduce_into(np.ones(2), np.ones(2, np.float32), "sum"), ValueError, "one dtype"),
    (lambda: reduce_into(np.ones((2, 2)), np.ones((2, 2)), "sum"), ValueError, "1-D"),
    (lambda: reduce_into(np.ones(2), [1.0, 2.0], "sum"), ValueError, "numpy arrays"),
    (lambda: reduce_into(np.ones(2, bool), np.ones(2, bool), "sum"), TypeError,
     "bool is not supported; expected one of: int8"),
    (lambda: reduce_into([1.0], np.ones(1), "sum"), TypeError, "__cuda_array_interface__"),
])
def test_bad_arguments_get_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_read_only_dst_is_refused():
    dst = np.ones(3)
    dst.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        reduce_into(dst, np.ones(3), "sum")


def test_strided_and_read_only_sources():
    dst = np.arange(10.0)[::2]
    src = np.arange(5.0)
    src.flags.writeable = False
    reduce_into(dst, src, "sum")
    assert dst.tolist() == [0.0, 3.0, 6.0, 9.0, 12.0]


def test_dtype_names_the_element_type_of_bit_patterns():
    a = np.arange(1, 40, dtype=np.float32).astype(ml_dtypes.bfloat16)
    bits = a.view(np.uint16).copy()
    reduce_into(bits, a.view(np.uint16), "prod", dtype=ml_dtypes.bfloat16)
    assert bits.tobytes() == folded(a, a, "prod").tobytes()
    divide_into(bits, bits, 3, dtype="bfloat16")
    want = folded(a, a, "prod")
    divide_into(want, want, 3)
    assert bits.tobytes() == want.tobytes()


def test_kernels_never_import_the_rest_of_pyar():
    import pyar.kernels
    for source in pathlib.Path(pyar.kernels.__file__).parent.glob("*.py"):
        text = source.read_text()
        assert "import pyar" not in text and "from pyar" not in text and "from .." not in text, \
            source


def test_device_module_imports_without_a_gpu_or_cupy():
    code = ("import sys; import pyar.kernels.device as d; "
            "assert not d.SIMULATED and 'cupy' not in sys.modules; print('imported')")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr[-3000:]


def test_cuda_kernels_under_the_simulator():
    script = pathlib.Path(__file__).parents[1] / "helpers" / "cuda_sim_check.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "all device kernels agree with the host kernels" in proc.stdout, proc.stdout


def test_the_benchmark_runs_every_op_and_dtype():
    import io

    from pyar.kernels import bench
    rows = bench.run((1,), budget=0, file=io.StringIO())
    assert len(rows) == len(DTYPES) * len(OPS) + sum(is_float(d) for d in DTYPES)
    assert all(row["kernel"] > 0 and row["numpy"] > 0 for row in rows)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_folder_is_reduce_into_without_the_checks(dtype):
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, 64 * dtype.itemsize, dtype=np.uint8).view(dtype)
    b = rng.integers(0, 256, 64 * dtype.itemsize, dtype=np.uint8).view(dtype)
    for op in OPS:
        checked, unchecked = a.copy(), a.copy()
        reduce_into(checked, b, op)
        folder(dtype, op)(unchecked, b)
        assert checked.tobytes() == unchecked.tobytes(), f"{dtype} {op}"
        bound = a.copy()
        fold = bound_fold(bound, b, op)
        fold()
        assert checked.tobytes() == bound.tobytes(), f"{dtype} {op} bound"
        b[:] = bound            # the bound fold reads the arrays as they are at each call
        fold()
        reduce_into(checked, checked.copy(), op)
        assert checked.tobytes() == bound.tobytes(), f"{dtype} {op} bound, twice"
    with pytest.raises(ValueError, match="op must be one of"):
        folder(dtype, "avg")


def test_bound_fold_checks_its_arrays_once():
    a, b = np.zeros(8, np.float32), np.ones(8, np.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        bound_fold(a[::2], b[::2], "sum")
    with pytest.raises(ValueError, match="one dtype and length"):
        bound_fold(a, b[:4], "sum")
    with pytest.raises(ValueError, match="op must be one of"):
        bound_fold(a, b, "avg")
    read_only = np.zeros(8, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        bound_fold(read_only, b, "sum")
