"""Run under mpiexec (tests/unit/test_device.py does, with PYAR_CUDA_AWARE=0 and =1): every collective
and algorithm on stand-in device arrays (tests/helpers/fake_cupy.py), or on cupy's with
PYAR_DEVICE_CHECK=cupy (tests/gpu/test_gpu.py), gives the numpy path's bits, with the
API's out/in-place semantics, never calls MPI with work pending on the stream, and reuses its
pinned buffer. A failed check raises, and ``-m mpi4py`` aborts the whole job."""

import os
import sys

import numpy as np
from mpi4py import MPI

REAL = os.environ.get("PYAR_DEVICE_CHECK") == "cupy"    # tests/gpu/test_gpu.py: on a real GPU
if REAL:
    import cupy as cp
else:
    sys.path.insert(0, os.path.dirname(__file__))
    import fake_cupy
    cp = fake_cupy.install()

import pyar  # noqa: E402
from pyar.runtime import cuda  # noqa: E402

comm = pyar.Comm(MPI.COMM_WORLD)
if not REAL:
    comm.mpi = fake_cupy.guard(comm.mpi)
rank, size = comm.rank, comm.size
AWARE = os.environ["PYAR_CUDA_AWARE"] == "1"
assert cuda.awareness().aware is AWARE


def sample(shape, dtype):
    n = int(np.prod(shape))
    values = (rank + 1) * 1000 + np.arange(n) * 7 % 251
    return values.astype(np.float64 if np.dtype(dtype).kind == "f" else np.int64) \
        .astype(dtype).reshape(shape)


def same(got, expected, what):
    assert isinstance(got, cp.ndarray), f"rank {rank} {what}: got {type(got).__name__}"
    assert got.shape == expected.shape and got.dtype == expected.dtype, \
        f"rank {rank} {what}: {got.shape} {got.dtype} vs {expected.shape} {expected.dtype}"
    assert got.get().tobytes() == expected.tobytes(), f"rank {rank} {what}: values differ"


def check(collective, algorithm, dtype, op):
    kw = {"algorithm": algorithm, "comm": comm}
    if op is not None:
        kw["op"] = op
    call = getattr(pyar, collective)
    shape = (size, 3) if collective == "alltoall" else (2, 5)
    host = sample(shape, dtype)
    what = f"{collective}/{algorithm}/{dtype}/{op}"
    if collective == "bcast":
        for root in range(size):
            x = cp.asarray(host)
            assert call(x, root=root, **kw) is x
            same(x, call(host.copy(), root=root, **kw), f"{what} root {root}")
        return
    if collective == "reduce":
        for root in range(size):
            expected = call(host, root=root, **kw)
            x = cp.asarray(host)
            got = call(x, root=root, **kw)
            out = cp.empty(host.shape, dtype)
            got_out = call(x, out, root=root, **kw)          # out: ignored off the root
            if rank == root:
                same(got, expected, f"{what} root {root}")
                assert got_out is out
                same(out, expected, f"{what} root {root} out")
            else:
                assert got is None and got_out is None, f"rank {rank} {what}: non-root got data"
            same(x, host, f"{what} root {root}: x untouched")
        return
    expected = call(host, **kw)
    x = cp.asarray(host)
    same(call(x, **kw), expected, what)
    same(x, host, f"{what}: x untouched")
    out = cp.empty(expected.shape, dtype)
    assert call(x, out, **kw) is out
    same(out, expected, f"{what} out")
    strided = cp.asarray(np.zeros((2 * expected.shape[0], *expected.shape[1:]), dtype))[::2]
    assert call(x, strided, **kw) is strided
    same(strided, expected, f"{what} strided out")
    if collective != "allgather":                      # in place
        x = cp.asarray(host)
        got = call(x, x, **kw)
        same(got, expected, f"{what} in place")
        if collective == "reduce_scatter":
            block = pyar.collectives.block(host.size, size, rank)
            mine = x.reshape(-1)[block]
            assert got.__cuda_array_interface__["data"] == mine.__cuda_array_interface__["data"], \
                f"rank {rank} {what}: not x's block"
            same(x.reshape(-1)[block], expected, f"{what} in place, x's block")
        else:
            assert got is x
    wide = cp.asarray(np.zeros((shape[0], 2 * shape[1]), dtype))
    wide[:, ::2] = cp.asarray(host)
    same(call(wide[:, ::2], **kw), expected, f"{what} strided x")


for collective in ("allreduce", "reduce_scatter", "allgather", "reduce", "bcast", "alltoall"):
    reducing = collective in ("allreduce", "reduce_scatter", "reduce")
    for algorithm in pyar.algorithms(collective):
        for dtype in ("float32", "float16", "int32", "uint8"):
            for op in (("sum", "avg", "max") if "float" in dtype else ("sum",)) if reducing \
                    else (None,):
                check(collective, algorithm, dtype, op)

if REAL:
    cp.cuda.get_current_stream().synchronize()
    comm.mpi.Barrier()
    if rank == 0:
        print(f"device_check: {size} ranks, {'direct' if AWARE else 'staged'}: every collective "
              f"and algorithm as on numpy (cupy {cp.__version__})", flush=True)
    sys.exit(0)
pinned = fake_cupy.STATE["pinned"]
for _ in range(5):
    pyar.allreduce(cp.asarray(sample((2, 5), "float32")), comm=comm)
assert fake_cupy.STATE["pinned"] == pinned, f"rank {rank}: pinned buffer not reused"
assert (pinned == 0) == AWARE, f"rank {rank}: {pinned} pinned allocations, aware={AWARE}"
handed = fake_cupy.STATE["mpi_calls"]          # MPI calls that got a device buffer
assert (handed > 0) == AWARE, f"rank {rank}: {handed} device buffers to MPI, aware={AWARE}"
try:
    pyar.allreduce(cp.asarray(sample((2, 5), "float32")), cp.empty((5, 2), "float32"), comm=comm)
    raise AssertionError("a wrong out shape was accepted")
except ValueError as e:
    assert "shape (2, 5)" in str(e), e
# GradientBuckets over device arrays: each bucket's average as on numpy
layout = [((3, 4), "float32"), ((5,), "float64"), ((2, 2), "float32")]
for views in (False, True):
    grads = [cp.asarray(sample(shape, dtype)) for shape, dtype in layout]
    buckets = pyar.GradientBuckets(grads, comm=comm, views=views)
    for i in (2, 0, 1):
        buckets.ready(i)
    buckets.wait()
    for g, (shape, dtype) in zip(buckets.grads, layout):
        expected = pyar.allreduce(sample(shape, dtype), op="avg", comm=comm)
        assert isinstance(g, cp.ndarray) and np.allclose(cp.asnumpy(g), expected), \
            f"rank {rank}: GradientBuckets(views={views}) on device arrays"
cp.cuda.get_current_stream().synchronize()
comm.mpi.Barrier()
if rank == 0:
    print(f"device_check: {size} ranks, {'direct' if AWARE else 'staged'}: every collective and "
          f"algorithm as on numpy; {pinned} pinned allocation(s), {handed} MPI calls on "
          f"device buffers", flush=True)
