"""A stand-in for cupy, for testing pyar.runtime.device's logic on a machine with no GPU.

``install()`` puts it in ``sys.modules`` as ``cupy`` and ``cupyx`` and routes
pyar's device kernels to the host kernels. Its arrays live in host memory and
expose ``__cuda_array_interface__`` over it, so mpi4py hands their addresses to
a non-CUDA-aware MPI as it would a CUDA-aware one's device pointers.

Streams are modelled: every operation that would be a kernel or an
asynchronous copy on cupy's current stream records the memory it reads and
writes as pending, and only ``synchronize()`` (or a blocking copy to the
host) completes it; ``guard(comm)`` wraps an mpi4py communicator so that an
MPI call given a device buffer that overlaps pending work fails (a race on
a GPU: a CUDA-aware MPI does not wait for cupy's stream). Work pending on
other memory is no hazard, so collectives in flight may go on while the
caller launches kernels on its own buffers, as a training loop does. What
this proves: pyar.runtime.device and the executor call the cupy API it models in an
order that keeps MPI off buffers with pending work, reuse their pinned buffers, and give the numpy path's results. What it
cannot prove: that real cupy behaves as modelled, that a CUDA-aware MPI takes
these buffers, or anything about the CUDA kernels (tests/helpers/cuda_sim_check.py and
``make gpu-check`` cover those).
"""

import sys
import types

import numpy as np

STATE = {"pending": [], "syncs": 0, "pinned": 0, "mpi_calls": 0}


def _extent(a: np.ndarray) -> tuple[int, int]:
    """The bytes [lo, hi) that ``a`` spans in memory."""
    lo = hi = a.__array_interface__["data"][0]
    for n, stride in zip(a.shape, a.strides):
        if n == 0:
            return lo, lo
        if stride < 0:
            lo += (n - 1) * stride
        else:
            hi += (n - 1) * stride
    return lo, hi + a.itemsize


def _launch(*arrays):
    """Work on the stream that reads or writes ``arrays`` (stand-in ndarrays)."""
    STATE["pending"].extend(e for e in (_extent(a._a) for a in arrays) if e[0] < e[1])


def _racing(a) -> bool:
    """Whether ``a`` (a stand-in ndarray) overlaps memory that pending work touches."""
    lo, hi = _extent(a._a)
    return lo < hi and any(lo < h and l < hi for l, h in STATE["pending"])


class _Flags:
    def __init__(self, a):
        self.c_contiguous = a.flags.c_contiguous


class ndarray:  # noqa: N801  (cupy's name)
    def __init__(self, a: np.ndarray):
        self._a = a

    dtype = property(lambda self: self._a.dtype)
    shape = property(lambda self: self._a.shape)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    ndim = property(lambda self: self._a.ndim)
    flags = property(lambda self: _Flags(self._a))

    def __len__(self):
        return len(self._a)

    @property
    def __cuda_array_interface__(self):
        if not self._a.flags.c_contiguous:
            raise ValueError("the stand-in exports contiguous arrays only")
        return {"shape": self._a.shape, "typestr": self._a.dtype.str, "strides": None,
                "data": (self._a.__array_interface__["data"][0], False), "version": 3,
                "stream": None}

    def __getitem__(self, key):
        return ndarray(self._a[key])

    def __setitem__(self, key, value):
        if not isinstance(value, ndarray):
            raise TypeError("the stand-in assigns device arrays only")
        _launch(self, value)
        self._a[key] = value._a

    def reshape(self, *shape):
        out = ndarray(self._a.reshape(*shape))
        if not self._a.flags.c_contiguous:
            _launch(self, out)               # cupy copies
        return out

    def copy(self, order="C"):
        out = ndarray(np.array(self._a, order=order))
        _launch(self, out)
        return out

    def astype(self, dtype):
        out = ndarray(self._a.astype(dtype))
        _launch(self, out)
        return out

    def view(self, dtype):
        return ndarray(self._a.view(dtype))

    def set(self, host):
        if not isinstance(host, np.ndarray) or host.shape != self.shape \
                or host.dtype != self.dtype:
            raise ValueError("set() needs a numpy array of the same shape and dtype")
        if not self._a.flags.c_contiguous:
            raise RuntimeError("Cannot set to non-contiguous array")
        _launch(self)
        self._a[...] = host

    def get(self):
        synchronize()
        return self._a.copy()


def empty(shape, dtype):
    a = np.empty(shape, dtype)
    a.reshape(-1).view(np.uint8)[...] = 0x5A          # garbage, to expose unwritten elements
    return ndarray(a)


def asarray(host):
    if isinstance(host, ndarray):
        return host
    out = ndarray(np.array(host, order="C"))
    _launch(out)
    return out


def ascontiguousarray(a):
    return a if a.flags.c_contiguous else a.copy()


def asnumpy(a, out=None, blocking=True):
    assert blocking
    if out is not None and not a.flags.c_contiguous:
        raise RuntimeError("the stand-in copies contiguous arrays only")
    synchronize()
    if out is None:
        return a._a.copy()
    out[...] = a._a
    return out


def synchronize():
    STATE["pending"].clear()
    STATE["syncs"] += 1


class _Stream:
    ptr = 0

    def synchronize(self):
        synchronize()


cuda = types.SimpleNamespace(get_current_stream=_Stream)


def empty_pinned(shape, dtype):
    STATE["pinned"] += 1
    return np.empty(shape, dtype)


def _device_buffers(args):
    for a in args:
        if isinstance(a, ndarray):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _device_buffers(a)


class guard:  # noqa: N801
    """An mpi4py communicator that refuses a device buffer with work pending on it."""

    def __init__(self, comm):
        self._comm = comm

    def __getattr__(self, name):
        method = getattr(self._comm, name)

        def checked(*args, **kwargs):
            device = list(_device_buffers(args))
            if any(map(_racing, device)):
                raise AssertionError(f"MPI {name} got a device buffer with work pending on "
                                     f"it on the stream")
            STATE["mpi_calls"] += bool(device)
            return method(*args, **kwargs)
        return checked


def _fold(dst, src, code, dtype):
    from pyar import kernels

    _launch(dst, src)
    kernels.reduce_into(dst._a, src._a, kernels.OPS[code])


def _divide(dst, src, divisor, dtype):
    from pyar import kernels

    _launch(dst, src)
    kernels.divide_into(dst._a, src._a, divisor)


def install():
    """Make ``import cupy`` / ``import cupyx`` give this module, and device kernels run on the
    host; returns the module."""
    from pyar.kernels import device

    module = sys.modules[__name__]
    sys.modules["cupy"] = sys.modules["cupyx"] = module
    device.reduce_into, device.divide_into = _fold, _divide
    return module
