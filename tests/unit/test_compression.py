"""The compression transforms on one rank: round trips within their error bounds, error
feedback's residual exact, the bytes each states, and bad specs refused."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays
from mpi4py import MPI

import pyar
from pyar.integrations import compression
from pyar.integrations.compression.cast import Cast
from pyar.integrations.compression.int8 import CHUNK, Int8, dequantize, quantize
from pyar.integrations.compression.topk import TopK

# The drawn gradients' heavy tails reach beyond float16's range: the cast to its inf is
# documented (pyar.compression.cast), and numpy's warning of it expected.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")

finite = st.floats(-1e4, 1e4, width=32).filter(lambda v: v == 0 or abs(v) > 1e-30)


@st.composite
def vectors(draw, sizes=st.integers(1, 3000)):
    """float32 gradients: small ones element by element, large ones from a drawn seed, scale
    and share of zeros (heavy tails: a Student t of 2 degrees)."""
    n = draw(sizes)
    if n <= 64 and draw(st.booleans()):
        return draw(arrays(np.float32, n, elements=finite))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    x = rng.standard_t(2, n) * 10.0 ** draw(st.integers(-20, 3))
    x[rng.random(n) < draw(st.sampled_from([0, 0.1, 0.9]))] = 0
    return x.astype(np.float32)


grads = vectors()
sizes = st.integers(1, 16)


def run(gen):
    """Drive a transform's generator to its result (a one-rank communicator)."""
    try:
        request = next(gen)
        while True:
            request = gen.send(request.wait())
    except StopIteration as stop:
        return stop.value


def self_comm():
    return pyar.Comm.of(MPI.COMM_SELF)


@given(grads, sizes)
def test_fp16_contribution_is_one_rounding_of_p_over_n(p, size):
    with np.errstate(over="ignore"):
        payload, decoded = Cast("fp16").contribution(p, size)
    assert payload.dtype == np.float16
    scaled = np.abs(p / size)
    big = scaled >= 65520                           # rounds past float16's largest: inf
    assert np.all(np.isinf(decoded[big]))
    normal = (scaled >= 2.0 ** -14) & ~big          # float16's normal range
    err = np.abs(decoded - p)
    assert np.all(err[normal] <= 2.0 ** -11 * np.abs(p[normal]) * 1.0001 + 1e-30)
    tiny = scaled < 2.0 ** -14                      # half a subnormal step, times N
    assert np.all(err[tiny] <= size * 2.0 ** -25 * 1.0001)


@given(grads, sizes)
def test_bf16_contribution_is_one_rounding(p, size):
    payload, decoded = Cast("bf16").contribution(p, size)
    assert payload.dtype == ml_dtypes.bfloat16
    assert np.all(np.abs(decoded - p) <= 2.0 ** -8 * np.abs(p) * 1.0001)


@given(vectors(st.integers(1, 8).map(lambda c: c * CHUNK)))
def test_int8_quantization_is_off_by_half_a_step_per_chunk(x):
    q, scales = quantize(x)
    assert q.dtype == np.int8 and scales.size == x.size // CHUNK
    assert np.all(np.abs(q.astype(int)) <= 127)
    bound = np.repeat(np.abs(x.reshape(-1, CHUNK)).max(axis=1) / 254, CHUNK)
    assert np.all(np.abs(dequantize(q, scales) - x) <= bound * (1 + 1e-5) + 1e-30)


@given(grads, sizes)
def test_int8_payload_holds_n_blocks_of_values_and_scales(p, size):
    payload, decoded = Int8().contribution(p, size)
    assert payload.dtype == np.uint8 and payload.shape[0] == size
    b = payload.shape[1] * CHUNK // (CHUNK + 4)
    assert b % CHUNK == 0 and b * size >= p.size and payload.shape[1] == b + 4 * b // CHUNK
    assert decoded.shape == p.shape


@given(grads, st.floats(0.001, 1.0))
def test_topk_keeps_the_k_largest_exactly(p, ratio):
    t = TopK(ratio)
    payload, decoded = t.contribution(p, 3)
    k = t.k(p.size)
    assert payload.dtype == np.int32 and payload.size == 2 * k
    index = payload[:k]
    assert np.unique(index).size == k
    assert np.array_equal(payload[k:].view(np.float32), p[index])
    kept = np.zeros(p.size, bool)
    kept[index] = True
    assert np.array_equal(decoded[kept], p[kept]) and not decoded[~kept].any()
    if k < p.size:                  # nothing left out is larger than what was kept
        assert np.abs(p[~kept]).max() <= np.abs(p[kept]).min()


@pytest.mark.parametrize("spec", ["int8", "topk:0.05", Cast("fp16", error_feedback=True)])
@given(g1=grads)
def test_error_feedback_keeps_the_residual_exactly(spec, g1):
    """e' = (g + e) - C(g + e), in float32 (0 where that is not finite: an overflow to
    float16's inf); the next step's input is g + e'."""
    t = compression.get(spec)
    c = self_comm()
    state = t.state(g1.size)
    assert state.residual is not None and not state.residual.any()
    for step in range(3):
        g = g1 * np.float32(step + 1)
        p = g + state.residual
        _, decoded = t.contribution(p.copy(), 1)
        result = run(t.reduce(g, state, c))
        kept = p - decoded
        kept[~np.isfinite(kept)] = 0
        assert np.array_equal(state.residual, kept)
        assert result.dtype == np.float32 and result.shape == (g.size,)


def test_an_overflow_leaves_no_residual_behind():
    """A gradient beyond float16's range averages to inf in its step (as torch's hook gives)
    and leaves no inf or NaN in the residual: the next step is finite again."""
    t, c = Cast("fp16", error_feedback=True), self_comm()
    state = t.state(3)
    big = np.array([1.0, 1e5, -1e5], np.float32)
    with np.errstate(over="ignore"):               # (the cast's warning: expected here)
        first = run(t.reduce(big, state, c))
    assert np.isinf(first[1:]).all() and np.isfinite(state.residual).all()
    again = run(t.reduce(np.ones(3, np.float32), state, c))
    assert np.isfinite(again).all()


@pytest.mark.parametrize("spec", ["fp16", "bf16", "int8", "topk:0.1"])
@given(g=grads)
def test_one_rank_average_is_its_own_contribution(spec, g):
    t = compression.get(spec)
    state = t.state(g.size)
    _, decoded = t.contribution(g.copy(), 1)
    result = run(t.reduce(g, state, self_comm()))
    if spec == "int8":              # the averaged block is requantized: a second rounding
        bound = np.repeat(np.abs(np.resize(decoded, -(-g.size // CHUNK) * CHUNK))
                          .reshape(-1, CHUNK).max(axis=1) / 254, CHUNK)[:g.size]
        assert np.all(np.abs(result - decoded) <= bound * 1.0001)
    else:
        assert np.array_equal(result, decoded)


def test_no_error_feedback_keeps_no_state():
    assert TopK(0.1, error_feedback=False).state(10).residual is None
    assert compression.get("fp16").state(10).residual is None


def test_wire_bytes_cut_the_float32_allreduce_by_the_stated_factors():
    """On 2 ranks (schedules only, no MPI): fp16 and bf16 half, int8 about a quarter, topk
    n / (N k) times less."""

    class Two:                          # what sent_bytes reads of a Comm
        size, rank, topology = 2, 0, pyar.Topology.regular(2, 2)

    n = 1 << 20
    full = compression.sent_bytes("allreduce", n, np.float32, Two)
    assert full == 4 * n                # 2(N-1)/N * 4n at N = 2
    assert compression.get("fp16").wire_bytes(n, Two) == full // 2
    assert compression.get("bf16").wire_bytes(n, Two) == full // 2
    int8 = compression.get("int8").wire_bytes(n, Two)
    assert int8 == n + n // 64          # 2(N-1)/N (n + 4n/CHUNK)
    topk = compression.get("topk:0.01").wire_bytes(n, Two)
    assert topk == 8 * TopK(0.01).k(n)  # (N-1) 8k


@pytest.mark.parametrize("spec,error", [
    ("fp32", ValueError), ("topk", ValueError), ("topk:x", ValueError), ("topk:0", ValueError),
    ("topk:1.5", ValueError), ("int8:3", ValueError), (3, TypeError)])
def test_bad_specs_say_what_was_expected(spec, error):
    with pytest.raises(error, match="topk|compression"):
        compression.get(spec)


def test_registered_names():
    assert compression.transforms() == ["bf16", "fp16", "int8", "topk"]
    assert isinstance(compression.get("topk:0.01"), TopK) and compression.get(None) is None
