"""CUDA kernels: the loops of :mod:`._loops` as numba.cuda grid-stride kernels, in place on
device arrays (anything with ``__cuda_array_interface__``: cupy, numba, torch), no copies.

A kernel runs on cupy's current stream when the arrays are cupy's, else on
the default stream; it is asynchronous like any kernel launch. Importing this
module needs numba only; a GPU (or ``NUMBA_ENABLE_CUDASIM=1``, the CPU
simulator the tests use) is needed when a kernel runs.
"""

import functools
import sys
from types import SimpleNamespace

import numpy as np
from numba import config

from . import HALF
from ._half import bitcasts
from ._loops import loops

SIMULATED = bool(config.ENABLE_CUDASIM)
cuda = None             # numba.cuda, once imported (a global: the simulator swaps it in kernels)


@functools.cache
def _compiled() -> SimpleNamespace:
    """numba.cuda and the kernels, made on the first device call: numba.cuda is heavy to
    import (a tenth of a second or more), and only a GPU (or the simulator) needs it."""
    global cuda
    from numba import cuda  # (heavy, and for device arrays only: imported here)

    if SIMULATED:      # kernels run as Python on numpy scalars: bitcast through numpy views
        def as_float(x):
            return np.uint32(x).view(np.float32)

        def as_bits(x):
            return np.float32(x).view(np.uint32)
    else:
        from numba.cuda.extending import intrinsic
        as_float, as_bits = bitcasts(intrinsic)
    lib = loops(cuda.jit(device=True), cuda.jit(device=True), as_float, as_bits)

    def grid_stride(loop):
        """A kernel running ``loop(dst, src, arg, start, step)`` over a grid-stride range."""
        @cuda.jit
        def kernel(dst, src, arg):
            loop(dst, src, arg, cuda.grid(1), cuda.gridsize(1))
        return kernel

    @cuda.jit
    def fold_float(dst, src, op, nan):
        lib.fold_float(dst, src, op, nan, cuda.grid(1), cuda.gridsize(1))

    return SimpleNamespace(
        fold_int=grid_stride(lib.fold_int), fold_float=fold_float,
        fold_f16=grid_stride(lib.fold_f16), fold_bf16=grid_stride(lib.fold_bf16),
        divide_float=grid_stride(lib.divide_float), divide_f16=grid_stride(lib.divide_f16),
        divide_bf16=grid_stride(lib.divide_bf16))


# Grid-stride loops need no more threads than the GPU holds at once; the simulator runs each
# thread as a Python thread, so it gets a tiny grid.
THREADS = 4 if SIMULATED else 256
MAX_BLOCKS = 2 if SIMULATED else 1024


def reduce_into(dst, src, code, dtype):
    """``dst = dst op src`` on device arrays (see :func:`pyar.kernels.reduce_into`)."""
    k = _compiled()
    stream = _stream(dst)
    d, s = _views(dst, src, dtype)
    if dtype.kind in "iu":
        _launch(k.fold_int, d.size, stream, d, s, code)
    elif dtype in HALF:
        _launch(k.fold_f16 if dtype == HALF[0] else k.fold_bf16, d.size, stream, d, s, code)
    else:
        _launch(k.fold_float, d.size, stream, d, s, code, dtype.type("nan"))


def divide_into(dst, src, divisor, dtype):
    """``dst = src / divisor`` on device arrays (see :func:`pyar.kernels.divide_into`)."""
    k = _compiled()
    stream = _stream(dst)
    d, s = _views(dst, src, dtype)
    if dtype in HALF:
        _launch(k.divide_f16 if dtype == HALF[0] else k.divide_bf16, d.size, stream, d, s,
                np.float32(divisor))
    elif dtype.kind == "f":
        _launch(k.divide_float, d.size, stream, d, s, dtype.type(divisor))
    else:
        raise TypeError(f"divide_into needs a floating dtype, got {dtype}")


def _launch(kernel, n, stream, *args):
    if n:
        blocks = min(-(-n // THREADS), MAX_BLOCKS)
        kernel[blocks, THREADS, stream](*args)


def _views(dst, src, dtype):
    """Numba device arrays over ``dst`` and ``src`` (no copies), of the dtype the kernel takes:
    the bit pattern (uint16) for half types."""
    d, s = _device_array(dst), _device_array(src)
    if d.ndim != 1 or d.shape != s.shape or d.dtype.itemsize != dtype.itemsize \
            or s.dtype != d.dtype:
        raise ValueError(f"dst and src must be 1-D device arrays of one dtype and length, "
                         f"got {d.dtype}{d.shape} and {s.dtype}{s.shape} for {dtype}")
    kernel_dtype = np.uint16 if dtype in HALF else dtype
    return d.view(kernel_dtype), s.view(kernel_dtype)


def _device_array(x):
    if getattr(x, "__cuda_ndarray__", False):      # numba's own (or the simulator's)
        return x
    return _compiled() and cuda.as_cuda_array(x, sync=False)


def _stream(x):
    """cupy's current stream for a cupy array; else the default stream."""
    if type(x).__module__.startswith("cupy") and not SIMULATED:
        cupy = sys.modules["cupy"]
        return _compiled() and cuda.external_stream(cupy.cuda.get_current_stream().ptr)
    return 0
