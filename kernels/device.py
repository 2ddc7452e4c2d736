"""CUDA kernels: the loops of :mod:`._loops` as numba.cuda grid-stride kernels, in place on
device arrays (anything with ``__cuda_array_interface__``: cupy, numba, torch), no copies.

A kernel runs on cupy's current stream when the arrays are cupy's, else on
the default stream; it is asynchronous like any kernel launch. Importing this
module needs numba only; a GPU (or ``NUMBA_ENABLE_CUDASIM=1``, the CPU
simulator the tests use) is needed when a kernel runs.
"""

import sys

import numpy as np
from numba import config, cuda

from . import HALF
from ._half import bitcasts
from ._loops import loops

SIMULATED = bool(config.ENABLE_CUDASIM)

if SIMULATED:      # kernels run as Python on numpy scalars: bitcast through numpy views
    def _as_float(x):
        return np.uint32(x).view(np.float32)

    def _as_bits(x):
        return np.float32(x).view(np.uint32)
else:
    from numba.cuda.extending import intrinsic
    _as_float, _as_bits = bitcasts(intrinsic)

_L = loops(cuda.jit(device=True), cuda.jit(device=True), _as_float, _as_bits)
_fold_int, _fold_float, _fold_f16, _fold_bf16 = _L.fold_int, _L.fold_float, _L.fold_f16, _L.fold_bf16
_divide_f16, _divide_bf16, _divide_float = _L.divide_f16, _L.divide_bf16, _L.divide_float


@cuda.jit
def _fold_int_kernel(dst, src, op):
    _fold_int(dst, src, op, cuda.grid(1), cuda.gridsize(1))


@cuda.jit
def _fold_float_kernel(dst, src, op, nan):
    _fold_float(dst, src, op, nan, cuda.grid(1), cuda.gridsize(1))


@cuda.jit
def _fold_f16_kernel(dst, src, op):
    _fold_f16(dst, src, op, cuda.grid(1), cuda.gridsize(1))


@cuda.jit
def _fold_bf16_kernel(dst, src, op):
    _fold_bf16(dst, src, op, cuda.grid(1), cuda.gridsize(1))


@cuda.jit
def _divide_float_kernel(dst, src, divisor):
    _divide_float(dst, src, divisor, cuda.grid(1), cuda.gridsize(1))


@cuda.jit
def _divide_f16_kernel(dst, src, divisor):
    _divide_f16(dst, src, divisor, cuda.grid(1), cuda.gridsize(1))


@cuda.jit
def _divide_bf16_kernel(dst, src, divisor):
    _divide_bf16(dst, src, divisor, cuda.grid(1), cuda.gridsize(1))


# Grid-stride loops need no more threads than the GPU holds at once; the simulator runs each
# thread as a Python thread, so it gets a tiny grid.
THREADS = 4 if SIMULATED else 256
MAX_BLOCKS = 2 if SIMULATED else 1024


def reduce_into(dst, src, code, dtype):
    """``dst = dst op src`` on device arrays (see :func:`pyar.kernels.reduce_into`)."""
    stream = _stream(dst)
    d, s = _views(dst, src, dtype)
    if dtype.kind in "iu":
        _launch(_fold_int_kernel, d.size, stream, d, s, code)
    elif dtype in HALF:
        kernel = _fold_f16_kernel if dtype == HALF[0] else _fold_bf16_kernel
        _launch(kernel, d.size, stream, d, s, code)
    else:
        _launch(_fold_float_kernel, d.size, stream, d, s, code, dtype.type("nan"))


def divide_into(dst, src, divisor, dtype):
    """``dst = src / divisor`` on device arrays (see :func:`pyar.kernels.divide_into`)."""
    stream = _stream(dst)
    d, s = _views(dst, src, dtype)
    if dtype in HALF:
        kernel = _divide_f16_kernel if dtype == HALF[0] else _divide_bf16_kernel
        _launch(kernel, d.size, stream, d, s, np.float32(divisor))
    elif dtype.kind == "f":
        _launch(_divide_float_kernel, d.size, stream, d, s, dtype.type(divisor))
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
    return cuda.as_cuda_array(x, sync=False)


def _stream(x):
    """cupy's current stream for a cupy array; else the default stream."""
    if type(x).__module__.startswith("cupy") and not SIMULATED:
        cupy = sys.modules["cupy"]
        return cuda.external_stream(cupy.cuda.get_current_stream().ptr)
    return 0
