"""``python -m pyar.kernels.bench_device``: the CUDA kernels' throughput beside cupy's own ``+=``.

For each dtype it times ``reduce_into(dst, src, "sum")`` on cupy arrays (the
numba.cuda kernel on cupy's current stream, with pyar's checks and dispatch)
and ``dst += src`` (cupy's elementwise kernel), with CUDA events on that
stream, best of 20 after a warm-up that also compiles the kernel. GB/s counts
the bytes moved: two arrays read, one written. Needs cupy and a GPU.

Usage: python -m pyar.kernels.bench_device [MIB]   (array size in MiB; default 256)
"""

import sys

import numpy as np

from . import reduce_into


def _best(cupy, call, reps=20):
    """Best GPU time in seconds of ``call`` (CUDA events on the current stream)."""
    call()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    best = float("inf")
    for _ in range(reps):
        start.record()
        call()
        stop.record()
        stop.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return best


def main(argv=None):
    import cupy

    mib = int((argv or sys.argv[1:] or ["256"])[0])
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    print(f"# CUDA kernels vs cupy +=, {mib} MiB arrays, sum, on {name}; GB/s = 3 x bytes / time")
    print(f"# {'dtype':<10}{'pyar GB/s':>12}{'cupy GB/s':>12}{'ratio':>8}")
    for dtype in ("float32", "float64", "float16", "int32", "int8"):
        n = (mib << 20) // np.dtype(dtype).itemsize
        dst, src = cupy.ones(n, dtype), cupy.ones(n, dtype)
        ours = _best(cupy, lambda: reduce_into(dst, src, "sum"))
        theirs = _best(cupy, lambda: dst.__iadd__(src))
        moved = 3 * dst.nbytes / 1e9
        print(f"  {dtype:<10}{moved / ours:>12.1f}{moved / theirs:>12.1f}{theirs / ours:>8.2f}",
              flush=True)


if __name__ == "__main__":
    main()
