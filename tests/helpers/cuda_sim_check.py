"""Run with NUMBA_ENABLE_CUDASIM=1 (tests/unit/test_kernels.py does): the CUDA kernels, simulated on
the CPU, give the host kernels' bits for every op and dtype, on arbitrary bit patterns."""

import os
import sys
import warnings

import numpy as np
from numba import cuda

from pyar import kernels
from pyar.kernels import device

# Simulated threads compute on numpy scalars, which warn on overflow where the GPU wraps.
warnings.simplefilter("ignore", RuntimeWarning)


def check(name, host, dev):
    got = dev.copy_to_host()
    if got.tobytes() != host.tobytes():
        bad = np.flatnonzero(got.view(np.uint8) != host.view(np.uint8))[:5]
        sys.exit(f"{name}: device differs from host at bytes {bad.tolist()}")


def main():
    assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and device.SIMULATED
    rng = np.random.default_rng(0)
    for dtype in kernels.DTYPES:
        for n in (0, 1, 37):        # 37: more elements than the simulated grid's 8 threads
            a = rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).view(dtype)
            b = rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).view(dtype)
            for op in kernels.OPS:
                host, dev = a.copy(), cuda.to_device(a)
                kernels.reduce_into(host, b, op)
                kernels.reduce_into(dev, cuda.to_device(b), op)
                check(f"{dtype} {op} n={n}", host, dev)
            if dtype.kind == "f" or dtype in kernels.HALF:
                host, dev = a.copy(), cuda.to_device(a)
                kernels.divide_into(host, host, 6)
                kernels.divide_into(dev, dev, 6)
                check(f"{dtype} divided n={n}", host, dev)
    # bfloat16 data in a uint16 device array (cupy has no bfloat16), named by dtype=
    a = np.arange(1, 38, dtype=np.float32).astype(kernels.BFLOAT16)
    host, dev = a.copy(), cuda.to_device(a.view(np.uint16))
    kernels.reduce_into(host, a, "prod")
    kernels.reduce_into(dev, cuda.to_device(a.view(np.uint16)), "prod", dtype=kernels.BFLOAT16)
    check("bfloat16 as uint16", host.view(np.uint16), dev)
    try:
        kernels.reduce_into(cuda.to_device(a), cuda.to_device(a[:3]), "sum")
        sys.exit("mismatched device arrays were accepted")
    except ValueError as e:
        assert "one dtype and length" in str(e), e
    print("all device kernels agree with the host kernels")


if __name__ == "__main__":
    main()
