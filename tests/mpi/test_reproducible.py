"""allreduce(reproducible=True): the same bits from every algorithm, and the bits of the
contributions' reproducible sum taken in one process (tests/unit/test_exact.py holds that
one to the exact sum, in any order, with zeros from any number of other ranks)."""

import ml_dtypes
import numpy as np
import pytest

import pyar
from pyar.algorithms import builder
from pyar.core import exact

from checks import agree

# pyar's own algorithms (not those other test modules register), and parameterized ones
ALGORITHMS = ["mpi"] + [a for a in pyar.algorithms() if a != "mpi" and
                        builder(a, "allreduce").__module__.startswith("pyar.")] + \
    ["knomial:k=3", "recexch:k=3", "segmented_ring:segment=100"]
DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16),
          np.dtype(ml_dtypes.bfloat16)]


def contribution(rank, count, dtype, seed=0):
    """Rank ``rank``'s values: magnitudes over 2**-20 - 2**20 (2**-6 - 2**6 for half types),
    so that float sums in different orders round differently."""
    rng = np.random.default_rng([rank, count, seed])
    spread = 20 if dtype.itemsize > 2 else 6
    return (rng.standard_normal(count) * 2.0 ** rng.integers(-spread, spread, count)) \
        .astype(dtype)


def in_one_process(xs, divisor=1):
    """The reproducible sum of the arrays ``xs``, its phases reduced here."""
    phases = [exact.reduction(x, divisor) for x in xs]
    asked = [next(p) for p in phases]
    try:
        while True:
            values = np.stack([a for a, _ in asked])
            total = values.max(axis=0) if asked[0][1] == "max" else values.sum(axis=0)
            asked = [p.send(total.copy()) for p in phases]
    except StopIteration as done:
        return done.value


@pytest.mark.sweep
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_gives_the_bits_of_the_one_process_sum(comm, algorithm):
    """Counts up to 1 Mi (from 8 ranks, where a 1 Mi call of every algorithm takes minutes of
    a 2-core machine, up to 64 Ki)."""
    for dtype in DTYPES:
        for count in sorted({0, 1, comm.size + 1, 1000, 65537} |
                            ({1 << 20} if dtype.itemsize == 4 and comm.size <= 5 else set())):
            x = contribution(comm.rank, count, dtype)
            got = pyar.allreduce(x, algorithm=algorithm, reproducible=True)
            want = in_one_process([contribution(r, count, dtype) for r in range(comm.size)])
            agree(comm, got.dtype == dtype and got.tobytes() == want.tobytes(),
                  f"{algorithm} {dtype} count={count}: not the one-process sum's bits")


def test_avg_in_place_out_and_torch(comm):
    x = contribution(comm.rank, 777, np.dtype(np.float32), seed=1)
    xs = [contribution(r, 777, np.dtype(np.float32), seed=1) for r in range(comm.size)]
    want = in_one_process(xs, comm.size)
    got = pyar.allreduce(x, op="avg", reproducible=True)
    agree(comm, got.tobytes() == want.tobytes(), "avg")
    y = x.copy()
    agree(comm, pyar.allreduce(y, y, op="avg", reproducible=True) is y and
          y.tobytes() == want.tobytes(), "in place")
    out = np.empty_like(x)
    agree(comm, pyar.allreduce(x, out, op="avg", reproducible=True) is out and
          out.tobytes() == want.tobytes(), "out")
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.copy())
    r = pyar.allreduce(t, op="avg", reproducible=True)
    agree(comm, isinstance(r, torch.Tensor) and r.numpy().tobytes() == want.tobytes(), "torch")


def test_max_min_and_integers_run_as_they_are_and_prod_is_refused(comm):
    x = contribution(comm.rank, 50, np.dtype(np.float64))
    for op in ("max", "min"):
        agree(comm, pyar.allreduce(x, op=op, reproducible=True).tobytes() ==
              pyar.allreduce(x, op=op).tobytes(), op)
    i = np.arange(10, dtype=np.int32) * (comm.rank + 1)
    agree(comm, np.array_equal(pyar.allreduce(i, reproducible=True), pyar.allreduce(i)), "int")
    with pytest.raises(ValueError, match="reproducible=True is for sum and avg"):
        pyar.allreduce(x, op="prod", reproducible=True)
    with pytest.raises(ValueError, match="reduce_dtype must be None"):
        pyar.allreduce(x, reproducible=True, reduce_dtype=np.float64)


def test_ranks_that_ask_differently_all_get_a_mismatch_error(comm):
    if comm.size == 1:
        pytest.skip("needs two ranks")
    c = pyar.Comm(comm.Dup())
    try:
        pyar.allreduce(np.ones(8, np.float32), comm=c, reproducible=comm.rank == 0, timeout=20)
        error = None
    except pyar.PyarError as e:
        error = e
    agree(comm, isinstance(error, pyar.MismatchError), f"{type(error).__name__}: {error}")


@pytest.mark.parametrize("cap", [1e-4, 25])
def test_buckets_average_each_gradient_as_its_own_reproducible_allreduce(comm, cap):
    """The reproducible sum is elementwise: a bucket's packing and its cap change no bit."""
    grads = [contribution(comm.rank, n, np.dtype(d), seed=n) for n, d in
             [(300, np.float32), (7, np.float64), (1000, np.float32), (64, ml_dtypes.bfloat16)]]
    want = [pyar.allreduce(g, op="avg", reproducible=True) for g in grads]
    buckets = pyar.GradientBuckets(grads, bucket_cap_mb=cap, reproducible=True)
    assert "reproducible" in repr(buckets)
    for i in reversed(range(len(grads))):
        buckets.ready(i)
    buckets.wait()
    agree(comm, all(g.tobytes() == w.tobytes() for g, w in zip(grads, want)), "buckets")
    with pytest.raises(ValueError, match="compression=None"):
        pyar.GradientBuckets(grads, compression="fp16", reproducible=True)
