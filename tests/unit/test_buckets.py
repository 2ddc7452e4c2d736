"""GradientBuckets on one rank: packing and unpacking exact for mixed shapes and dtypes, the
bucket layout and launch order, views in place, and misuse refused."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st
from mpi4py import MPI

import pyar
from pyar.integrations.buckets import MiB

DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]
shapes = st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple)
layouts = st.lists(st.tuples(shapes, st.sampled_from(DTYPES)), min_size=1, max_size=12)


def make(layout, seed=0):
    rng = np.random.default_rng(seed)
    return [np.array(rng.standard_normal(shape) * 100, dtype) for shape, dtype in layout]


@given(layouts, st.sampled_from([1e-5, 1e-4, 25]), st.booleans(), st.randoms())
def test_one_rank_round_trip_is_exact_and_buckets_hold_one_dtype(layout, cap, views, rnd):
    grads = make(layout)
    expect = [g.copy() for g in grads]
    b = pyar.GradientBuckets(grads, bucket_cap_mb=cap, comm=MPI.COMM_SELF, views=views)
    assert sorted(i for m in b.members for i in m) == list(range(len(grads)))
    for flat, members in zip(b.flat, b.members):
        assert {grads[i].dtype for i in members} == {flat.dtype}
        assert flat.size == sum(grads[i].size for i in members)
        # reverse registration order; closed at the cap: only the last member crosses it
        assert members == sorted(members, reverse=True)
        assert sum(grads[i].nbytes for i in members[:-1]) < cap * MiB
    for step in range(2):
        order = list(range(len(grads)))
        rnd.shuffle(order)
        for i in order:
            b.ready(i)
        b.wait()
        for g, e, out in zip(grads, expect, b.grads):
            assert out.shape == e.shape and out.dtype == e.dtype
            assert out.tobytes() == e.tobytes()     # the average of one rank: itself
    if views:
        for i, g in enumerate(b.grads):
            bucket = b.flat[b.bucket_of[i]]
            assert np.shares_memory(g, bucket)
    else:
        assert all(out is g for out, g in zip(b.grads, grads))


def test_views_are_written_in_place_and_nothing_is_copied():
    grads = [np.ones(3, np.float32), np.ones((2, 2), np.float32)]
    b = pyar.GradientBuckets(grads, comm=MPI.COMM_SELF, views=True)
    assert len(b) == 1
    flat = b.flat[0]
    b.grads[0][...] = [1, 2, 3]
    b.grads[1][...] = 7
    assert np.array_equal(flat, [7, 7, 7, 7, 1, 2, 3])      # reversed: gradient 1 first
    for i in (1, 0):
        b.ready(i)
    b.wait()
    assert np.array_equal(flat, [7, 7, 7, 7, 1, 2, 3])
    assert np.array_equal(grads[0], [1, 1, 1])              # the originals are left alone


def test_buckets_launch_in_order_whatever_order_ready_comes_in():
    """A bucket launches only once every bucket before it has: the order is the same on every
    rank, so their collectives match."""
    grads = [np.ones(1 << 18, np.float32) for _ in range(4)]     # 1 MiB each
    b = pyar.GradientBuckets(grads, bucket_cap_mb=1, comm=MPI.COMM_SELF)
    assert b.members == [[3], [2], [1], [0]]
    b.ready(0)                       # the last bucket: nothing launches yet
    assert b._flights == [None] * 4
    b.ready(2)
    assert b._flights == [None] * 4
    b.ready(3)                       # bucket 0, then 1 (gradient 2), launch
    assert [f is not None for f in b._flights] == [True, True, False, False]
    b.ready(1)
    assert all(f is not None for f in b._flights)
    b.wait()


def test_misuse_raises_clear_errors():
    grads = [np.ones(4, np.float32), np.ones(2, np.float32)]
    b = pyar.GradientBuckets(grads, comm=MPI.COMM_SELF)
    b.ready(1)
    with pytest.raises(ValueError, match="gradient 1 marked ready twice"):
        b.ready(1)
    for bad in (2, -1, "0", True):
        with pytest.raises(ValueError, match=r"index in \[0, 2\)"):
            b.ready(bad)
    with pytest.raises(ValueError, match="gradient 0 not marked ready"):
        b.wait()
    for i in (0, 1):                 # the next step starts clean
        b.ready(i)
    b.wait()
    with pytest.raises(TypeError, match="must be floating"):
        pyar.GradientBuckets([np.ones(3, np.int32)], comm=MPI.COMM_SELF)
    with pytest.raises(TypeError, match="numpy array, a cupy array or a torch tensor"):
        pyar.GradientBuckets([[1.0, 2.0]], comm=MPI.COMM_SELF)
    with pytest.raises(ValueError, match="at least one"):
        pyar.GradientBuckets([], comm=MPI.COMM_SELF)
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        pyar.GradientBuckets(grads, bucket_cap_mb=0, comm=MPI.COMM_SELF)
    with pytest.raises(ValueError, match="unknown compression"):
        pyar.GradientBuckets(grads, compression="zip", comm=MPI.COMM_SELF)


@pytest.mark.parametrize("spec", ["fp16", "bf16", "int8", "topk:0.5"])
def test_compressed_buckets_keep_their_state_per_bucket(spec):
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(300).astype(np.float32) for _ in range(3)]
    b = pyar.GradientBuckets(grads, bucket_cap_mb=300 * 4 / MiB, comm=MPI.COMM_SELF,
                             compression=spec)
    assert len(b) == 3 and len({id(s) for s in b.states}) == 3
    before = [g.copy() for g in grads]
    for i in range(3):
        b.ready(i)
    b.wait()
    for g, e in zip(grads, before):
        if spec.startswith("topk"):   # the larger half kept exactly, the rest left for later
            assert np.count_nonzero(g == e) == 150 and not g[g != e].any()
        else:
            assert np.allclose(g, e, rtol=0.01, atol=0.01 * np.abs(e).max())
    assert b.bytes_sent == 0         # one rank sends nothing
