"""Reduction kernels: fold one array into another in place, and the division that ends an average.

Installed as ``pyar.kernels`` and never imports the rest of pyar, so it can be
used, tested and benchmarked on its own. Ops are named by the strings
``"sum" "prod" "max" "min"``; dtypes are those of :data:`DTYPES`.

Host arrays (numpy) go to Numba loops compiled on first use per dtype and
cached on disk (:mod:`.host`); device arrays (anything with
``__cuda_array_interface__``, e.g. cupy) to numba.cuda grid-stride kernels on
the caller's stream (:mod:`.device`: numba.cuda is imported only then). :mod:`.mailbox` runs
a small call's shared-memory messages, copies and folds with these loops, as
one native program (the runtime's mailboxes).

Semantics are numpy's, made commutative bit for bit (``a op b`` and ``b op a``
have the same bits), so that algorithms in which two ranks fold the same pair
in opposite order (recursive doubling) still give every rank identical bits:

- integers wrap as in C;
- max/min propagate NaN; when zeros of both signs meet, max gives ``+0.0``
  and min ``-0.0`` (IEEE 754-2019 maximum/minimum), where numpy returns
  whichever came first;
- every NaN a float kernel writes is the dtype's canonical quiet NaN
  (``np.nan``'s bits), where numpy keeps the payload of the first NaN operand;
- float16 and bfloat16 are computed as numpy and ml_dtypes compute them:
  widen to float32, operate, round to nearest-even, i.e. bitwise
  ``(a.astype(float32) op b.astype(float32)).astype(dtype)`` but for NaNs;
  :func:`cast_into` is that widening and rounding alone.

Compiling takes seconds per kernel and dtype, so host kernels compile lazily,
per signature, into Numba's disk cache; a compilation holds a file lock
beside the cache (:mod:`._cache`), so that ranks starting together neither
corrupt it nor load half-written code. ``python -m pyar.kernels`` compiles
every host kernel once (``make`` does, before any mpiexec).
"""

from functools import partial

import ml_dtypes
import numba
import numpy as np

__all__ = ["OPS", "DTYPES", "HALF", "BFLOAT16", "reduce_into", "folder", "bound_fold",
           "divide_into", "cast_into", "exponents_into", "limbs_into", "decode_into",
           "warm_up"]

OPS = ("sum", "prod", "max", "min")
_CODES = {op: code for code, op in enumerate(OPS)}
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = tuple(np.dtype(t) for t in (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", BFLOAT16, "float32", "float64"))
HALF = (np.dtype(np.float16), BFLOAT16)
_NAMES = ", ".join(str(d) for d in DTYPES)

from . import _cache, device, exact, host, mailbox  # noqa: E402  (they take the names above)


def reduce_into(dst, src, op, *, dtype=None):
    """``dst = dst op src`` elementwise, in place.

    Args:
        dst, src: 1-D arrays of one dtype and length, both numpy or both on the
            device (``__cuda_array_interface__``).
        op: ``"sum" "prod" "max" "min"``.
        dtype: the element type when the arrays' own dtype cannot say it (bfloat16
            data seen as ``uint16``); default ``dst.dtype``.
    """
    entry = _HOST.get(getattr(dst, "dtype", None))
    code = _CODES.get(op)
    if (entry is None or code is None or dtype is not None or type(dst) is not np.ndarray
            or type(src) is not np.ndarray or src.dtype is not dst.dtype or dst.ndim != 1
            or len(src) != len(dst) or not dst.flags.writeable):
        entry, code = _checked(dst, src, op, dtype)      # every check; device arrays: done
        if entry is None:
            return
    kernel, half, nan = entry[0]
    if half:
        kernel(dst.view(np.uint16), src.view(np.uint16), code)
    elif nan is None:
        kernel(dst, src, code)
    else:
        kernel(dst, src, code, nan)


def folder(dtype, op):
    """``fold(dst, src)``: :func:`reduce_into` on host arrays of ``dtype`` with ``op`` resolved
    once and nothing checked per call (about a microsecond less a call), for callers that
    guarantee what reduce_into checks: 1-D C-contiguous writable numpy arrays of ``dtype``
    and one length (the runtime's own buffers)."""
    kernel, half, code, nan = _resolved(dtype, op)
    if half:
        return lambda dst, src: kernel(dst.view(np.uint16), src.view(np.uint16), code)
    if nan is None:
        return lambda dst, src: kernel(dst, src, code)
    return lambda dst, src: kernel(dst, src, code, nan)


def bound_fold(dst, src, op):
    """``fold()``: :func:`reduce_into` ``(dst, src, op)`` with the arrays, op and kernel bound
    now, for a caller that folds the same two buffers again and again (the runtime's
    resident buffers for small messages); the arrays are checked here, once."""
    _host_kernels(dst, src, None)
    if not (dst.flags.c_contiguous and src.flags.c_contiguous):
        raise ValueError("bound_fold needs C-contiguous arrays")
    kernel, half, code, nan = _resolved(dst.dtype, op)
    if half:
        return partial(kernel, dst.view(np.uint16), src.view(np.uint16), code)
    return partial(kernel, dst, src, code) if nan is None else partial(kernel, dst, src, code, nan)


def _resolved(dtype, op):
    """(compiled kernel, half?, op code, NaN or None) for contiguous 1-D arrays of ``dtype``.

    The kernel is Numba's machine code for that one signature, called without
    the dispatcher's type checks (a quarter of a microsecond a call, where the
    whole fold of a small message takes half of one), so the caller must pass
    exactly such arrays; where Numba keeps its overloads elsewhere, the dispatcher.
    """
    code = _CODES.get(op)
    if code is None:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    dtype = np.dtype(dtype)
    if not _HOST:
        _fill_host_table()
    kernel, half, nan = _HOST[_dtype(np.empty(0, dtype), None)][0]
    sample = np.empty(0, np.uint16 if half else dtype)
    args = (sample, sample, code) if nan is None else (sample, sample, code, nan)
    kernel(*args)                       # compiled, or loaded from the cache, now
    try:
        kernel = kernel.overloads[tuple(map(numba.typeof, args))].entry_point
    except (AttributeError, KeyError):
        pass
    return kernel, half, code, nan


def _checked(dst, src, op, dtype):
    """The host-table entry and op code for ``reduce_into`` after every check; for device
    arrays, (None, None) once the device kernel is launched."""
    code = _CODES.get(op)
    if code is None:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if isinstance(dst, np.ndarray):
        return _host_kernels(dst, src, dtype), code
    device.reduce_into(dst, src, code, _dtype(_on_device(dst), dtype))
    return None, None


def divide_into(dst, src, divisor, *, dtype=None):
    """``dst = src / divisor`` elementwise on floating arrays: the end of an average, fused with
    the copy to ``dst`` (``dst`` may be ``src``: in place).

    Bitwise what numpy gives for float32/float64 (``np.divide(src, divisor)``,
    the divisor rounded to the dtype first) and, for float16 and bfloat16,
    ``(src.astype(float32) / float32(divisor)).astype(dtype)``: the divisor is
    rounded to float32, not to the half type (numpy would round 257 to 256 in
    bfloat16), and NaNs come out canonical. Same arguments as :func:`reduce_into`.
    """
    if isinstance(dst, np.ndarray):
        kernel, half, scalar = _host_kernels(dst, src, dtype)[1]
        if kernel is None:
            raise TypeError(f"divide_into needs a floating dtype, got {dtype or dst.dtype}")
        if half:
            kernel(dst.view(np.uint16), src.view(np.uint16), np.float32(divisor))
        else:
            kernel(src, scalar(divisor), out=dst)
    else:
        device.divide_into(dst, src, divisor, _dtype(_on_device(dst), dtype))


def cast_into(dst, src):
    """``dst = src`` converted to dst's dtype, between a half type (float16, bfloat16) and
    float32, on host arrays, bitwise numpy's and ml_dtypes' ``astype``: exact from the half
    type (NaN payloads kept); nearest-even to it (beyond its range: inf), where every NaN
    comes out canonical. One vectorized pass (numpy's own float16 casts took 6 to 10 times
    as long on the development machine).

    Args:
        dst, src: 1-D numpy arrays of one length (strided ones take a slower loop); one
            of them float32, the other float16 or bfloat16.
    """
    pair = (getattr(dst, "dtype", None), getattr(src, "dtype", None))
    kernel = _CASTS.get(pair)
    if kernel is None or not (isinstance(dst, np.ndarray) and isinstance(src, np.ndarray)):
        raise TypeError(f"cast_into converts numpy arrays between float32 and float16 or "
                        f"bfloat16, got {type(dst).__name__} {pair[0]} from "
                        f"{type(src).__name__} {pair[1]}")
    if dst.shape != src.shape or dst.ndim != 1:
        raise ValueError(f"dst and src must be 1-D arrays of one length, got {dst.shape} "
                         f"and {src.shape}")
    if not dst.flags.writeable:
        raise ValueError("dst is read-only")
    kernel(dst.view(np.uint16) if dst.dtype in HALF else dst,
           src.view(np.uint16) if src.dtype in HALF else src)


def _exact_arrays(x, *others):
    """``x`` and ``others`` checked for :mod:`.exact`'s kernels: 1-D contiguous numpy arrays
    of one length, ``x`` float32 or float64."""
    if not isinstance(x, np.ndarray) or x.dtype not in (_F32, _F64):
        raise TypeError(f"reproducible sums' kernels take float32 or float64 numpy arrays, "
                        f"got {type(x).__name__} {getattr(x, 'dtype', '')}")
    for a in (x, *others):
        if not isinstance(a, np.ndarray) or a.ndim != 1 or a.size != x.size or \
                not a.flags.c_contiguous:
            raise ValueError(f"expected 1-D contiguous numpy arrays of {x.size} elements, got "
                             f"{type(a).__name__} {getattr(a, 'shape', '')}")


def exponents_into(e, x):
    """``e[i]`` (int16): the binary exponent of ``x[i]`` (float32/64), ``|x| < 2**e``;
    ``exact.ZERO`` for 0, ``exact.SPECIAL`` for inf and NaN (:mod:`pyar.core.exact`)."""
    _exact_arrays(x, e)
    if x.dtype == _F32:
        exact.exponents(e, x, x.view(np.int32), 23, 0xFF)
    else:
        exact.exponents(e, x, x.view(np.int64), 52, 0x7FF)


def limbs_into(hi, lo, x, shared):
    """The int64 limbs of ``x`` (float32/64) on the grid ``2**(shared - 62)``, ``shared``
    every rank's largest exponent (:func:`exponents_into`, reduced with max)."""
    _exact_arrays(x, hi, lo, shared)
    exact.limbs(hi, lo, x, shared)


def decode_into(out, hi, lo, shared, divisor=1):
    """``out`` (float32/64): the value of the limbs ``hi``, ``lo`` summed over the ranks,
    divided by ``divisor``: float64, then rounded to out's dtype."""
    _exact_arrays(out, hi, lo, shared)
    exact.decode(out, hi, lo, shared, divisor)


_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_CASTS = {(_F32, HALF[0]): host.widen_f16, (HALF[0], _F32): host.narrow_f16,
          (_F32, BFLOAT16): host.widen_bf16, (BFLOAT16, _F32): host.narrow_bf16}


def _on_device(x):
    """``x`` if it is a device array (numba's simulated ones too), else a TypeError."""
    if hasattr(x, "__cuda_array_interface__") or getattr(x, "__cuda_ndarray__", False):
        return x
    raise TypeError(f"expected a numpy array or a device array with __cuda_array_interface__, "
                    f"got {type(x).__name__}")


def _dtype(dst, dtype):
    found = np.dtype(dtype) if dtype is not None else np.dtype(dst.dtype)
    if found not in DTYPES:
        raise TypeError(f"dtype {found} is not supported; expected one of: {_NAMES}")
    return found


# dtype -> ((fold kernel, half?, NaN or None), (divide kernel or None, half?, divisor's type))
_HOST = {}


def _host_kernels(dst, src, dtype):
    """The host kernels for ``dst`` and ``src``, after checking them (the hot path: cheap)."""
    if not (isinstance(src, np.ndarray) and src.dtype == dst.dtype and src.shape == dst.shape
            and dst.ndim == 1):
        raise ValueError(f"dst and src must be 1-D numpy arrays of one dtype and length, got "
                         f"{type(dst).__name__} {dst.dtype}{dst.shape} and "
                         f"{type(src).__name__} {getattr(src, 'dtype', '?')}"
                         f"{getattr(src, 'shape', '')}")
    if not dst.flags.writeable:
        raise ValueError("dst is read-only")
    found = _HOST.get(dst.dtype if dtype is None else np.dtype(dtype))
    if found is None:
        if not _HOST:
            _fill_host_table()
        found = _HOST.get(_dtype(dst, dtype))
    return found


def _fill_host_table():
    for d in DTYPES:
        if d in HALF:
            f16 = d == HALF[0]
            _HOST[d] = ((host.fold_f16 if f16 else host.fold_bf16, True, None),
                        (host.divide_f16 if f16 else host.divide_bf16, True, None))
        elif d.kind == "f":
            _HOST[d] = (host.fold_float, False, d.type("nan")), (np.divide, False, d.type)
        else:
            _HOST[d] = (host.fold_int, False, None), (None, False, None)


def warm_up(dtypes=DTYPES, *, fresh=False, file=None):
    """Compile (or load from the cache) the host kernels for ``dtypes`` on contiguous arrays;
    ``fresh``: empty their cache first."""
    if fresh:
        for kernel in (*host.KERNELS, *exact.KERNELS, mailbox.run, mailbox.start, mailbox.take):
            with _cache.lock(kernel):
                kernel._cache.flush()
    mailbox.runner()
    mailbox.starter()
    for dtype in dtypes:
        dst, src = np.ones(4, dtype), np.ones(4, dtype)
        reduce_into(dst, src, "sum")
        if dtype.kind == "f" or dtype in HALF:
            divide_into(dst, src, 2)
        if dtype in HALF:
            cast_into(np.ones(4, np.float32), src)
            cast_into(dst, np.ones(4, np.float32))
        if dtype in (_F32, _F64):
            e, hi, lo = np.empty(4, np.int16), np.empty(4, np.int64), np.empty(4, np.int64)
            exponents_into(e, src)
            limbs_into(hi, lo, src, e)
            decode_into(dst, hi, lo, e, 2)
        if file is not None:
            print(f"pyar.kernels: {dtype} ready", file=file, flush=True)
