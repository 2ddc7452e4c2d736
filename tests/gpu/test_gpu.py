"""On a real GPU only (`make gpu-check`; skipped where cupy or a GPU is missing, as in CI): the CUDA
kernels on cupy arrays, bit for bit against the host kernels, and every collective on cupy arrays
on 2 ranks sharing the GPU, staged and, where the MPI library is CUDA-aware, direct."""

import os

import numpy as np
import pytest

from launch import explain, run

cupy = pytest.importorskip("cupy")
try:
    GPUS = cupy.cuda.runtime.getDeviceCount()
except Exception:       # no driver: cupy raises its CUDA runtime error
    GPUS = 0
pytestmark = pytest.mark.skipif(GPUS == 0 or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1",
                                reason="needs a GPU (and not the CUDA simulator)")

from pyar import kernels  # noqa: E402
from pyar.runtime import cuda  # noqa: E402


@pytest.mark.parametrize("dtype", [d for d in kernels.DTYPES if d != kernels.BFLOAT16])
@pytest.mark.parametrize("n", [0, 1, 1_000_003])
def test_cuda_kernels_give_the_host_kernels_bits(dtype, n):
    rng = np.random.default_rng(n)
    a = rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).view(dtype)
    b = rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).view(dtype)
    for op in kernels.OPS:
        host, dev = a.copy(), cupy.asarray(a)
        kernels.reduce_into(host, b, op)
        kernels.reduce_into(dev, cupy.asarray(b), op)
        assert dev.get().tobytes() == host.tobytes(), f"{dtype} {op} n={n}"
    if dtype.kind == "f":
        host, dev = a.copy(), cupy.asarray(a)
        kernels.divide_into(host, host, 6)
        kernels.divide_into(dev, dev, 6)
        assert dev.get().tobytes() == host.tobytes(), f"{dtype} divided n={n}"


def test_bfloat16_as_uint16_on_the_gpu():
    a = np.arange(1, 4001, dtype=np.float32).astype(kernels.BFLOAT16)
    host, dev = a.copy(), cupy.asarray(a.view(np.uint16))
    kernels.reduce_into(host, a, "sum")
    kernels.reduce_into(dev, cupy.asarray(a.view(np.uint16)), "sum", dtype=kernels.BFLOAT16)
    assert dev.get().tobytes() == host.view(np.uint16).tobytes()


@pytest.mark.parametrize("aware", ["0", "1"])
def test_every_collective_on_cupy_arrays_on_2_ranks(aware):
    if aware == "1" and not cuda.detect().aware:
        pytest.skip(f"the MPI library is not CUDA-aware ({cuda.detect().reason})")
    proc = run(2, "tests/helpers/device_check.py", timeout=240,
               env={cuda.ENV: aware, "PYAR_DEVICE_CHECK": "cupy"})
    assert proc.returncode == 0, explain(proc)
    print(proc.stdout.strip().splitlines()[-1])
    assert "device_check: 2 ranks" in proc.stdout, explain(proc)
