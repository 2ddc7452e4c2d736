"""Every algorithm, simulated, against a numpy reduction: every size, count, op and dtype."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import pyar
from pyar.core.ops import DTYPES, HALF, Op, is_float
from pyar.verify import describe, magnitude, mismatches, reference, sample
from tiers import sizes_up_to_64

SCHEDULED = [a for a in pyar.algorithms() if a != "mpi"]


def check_allreduce(algorithm, size, count, op, dtype, seed=0):
    inputs = [sample(r, count, dtype, op, seed) for r in range(size)]
    originals = [x.copy() for x in inputs]
    result = pyar.simulate(pyar.schedule(algorithm, size, count), inputs, op=op)
    expected = reference(inputs, op)
    scale = magnitude(inputs, op)
    for r, out in enumerate(result.outputs):
        bad = mismatches(out, expected, op, size, scale)
        assert bad.size == 0, f"{algorithm} N={size} rank {r}: {describe(out, expected, bad)}"
        assert out.tobytes() == result.outputs[0].tobytes(), \
            f"{algorithm} N={size}: rank {r} differs bitwise from rank 0"
    for x, original in zip(inputs, originals):
        assert np.array_equal(x, original), "simulate modified its input"
    return result


@pytest.mark.parametrize("algorithm", SCHEDULED)
@pytest.mark.parametrize("size", sizes_up_to_64())
def test_every_size_up_to_64(algorithm, size):
    for count in (0, 1, size - 1, size, 3 * size + 1, 1000):
        check_allreduce(algorithm, size, count, Op.SUM, np.int32)
    check_allreduce(algorithm, size, 2 * size + 3, Op.SUM, np.float64)


@pytest.mark.parametrize("algorithm", SCHEDULED)
@pytest.mark.parametrize("op", [Op.MAX, Op.MIN])
def test_signed_zeros_give_every_rank_the_same_bits(algorithm, op):
    for size in range(2, 17):
        check_allreduce(algorithm, size, 40, op, np.float32)


@pytest.mark.parametrize("algorithm", ["naive", "recursive_doubling", "rabenseifner", "binomial"])
@pytest.mark.parametrize("size", [100, 255, 1000, 1024])
def test_large_rank_counts(algorithm, size):
    check_allreduce(algorithm, size, 2 * size + 5, Op.SUM, np.int64)


@pytest.mark.parametrize("size", [100, 257])
def test_large_rank_counts_ring(size):
    check_allreduce("ring", size, 2 * size + 5, Op.SUM, np.int64)


@given(algorithm=st.sampled_from(SCHEDULED), size=st.integers(1, 40),
       count=st.integers(0, 5000), op=st.sampled_from(list(Op)),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 1000))
def test_property_against_numpy(algorithm, size, count, op, dtype, seed):
    if op is Op.AVG and not is_float(dtype):
        op = Op.SUM
    check_allreduce(algorithm, size, count, op, dtype, seed)


@pytest.mark.parametrize("algorithm", SCHEDULED)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_every_op(algorithm, dtype):
    """float16 and bfloat16 reduce in float32 and round once: within tolerance of the float64
    reduction, and every rank's bits identical (signed zeros and NaNs included)."""
    for size in (1, 2, 3, 4, 5, 7, 8, 9, 16):
        for op in Op:
            check_allreduce(algorithm, size, 3 * size + 2, op, dtype, seed=size)
    inputs = [np.array([np.nan, 1, -0.0, np.inf], dtype) for _ in range(3)]
    inputs[1][0] = -np.nan
    for op in ("sum", "max", "min"):
        outputs = pyar.simulate(pyar.schedule(algorithm, 3, 4), inputs, op=op).outputs
        assert len({o.tobytes() for o in outputs}) == 1, f"{algorithm} {op}: ranks differ"


def test_avg_on_integers_is_a_type_error():
    with pytest.raises(TypeError, match="avg"):
        pyar.simulate(pyar.schedule("ring", 2, 3), [np.ones(3, int)] * 2, op="avg")


def test_simulate_checks_its_inputs():
    s = pyar.schedule("ring", 2, 3)
    with pytest.raises(ValueError, match="one input per rank"):
        pyar.simulate(s, [np.ones(3)])
    with pytest.raises(ValueError, match="rank 1 must have 3 elements of float64"):
        pyar.simulate(s, [np.ones(3), np.ones(4)])
