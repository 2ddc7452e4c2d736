"""PyTorch interop (the ``torch`` extra): tensors in the collectives, and a DDP communication hook.

Every pyar collective takes torch tensors for ``x`` and ``out`` and returns
tensors: a CPU tensor is read and written through ``Tensor.numpy()`` (the
same memory, no copy; bfloat16 through an int16 view), a CUDA tensor through
DLPack as a cupy array (:mod:`pyar.device`); the result is ``out`` itself when
given, else a tensor sharing the result array's memory. :mod:`pyar.api` comes
here only for an ``x`` that is not a numpy array, so the numpy path pays
nothing.

:func:`comm_hook` is a ``DistributedDataParallel.register_comm_hook`` hook
that averages each DDP bucket with pyar (and a :mod:`pyar.compression`
transform, its error-feedback state kept per bucket)::

    ddp.register_comm_hook(pyar.torch.HookState(compression="fp16"), pyar.torch.comm_hook)

DDP still needs a process group for its set-up (a gloo one will do: it
broadcasts the parameters and checks their shapes across ranks when it is
made); with the hook and ``broadcast_buffers=False`` no gradient goes through
it (``tests/mpi/test_torch.py`` checks that its sequence number stays put).
The hook runs the bucket's average blocking, on autograd's thread, and
returns a completed future: the overlap is DDP's (the later buckets' backward
waits for it), not pyar's progress thread.
"""

import ml_dtypes
import numpy as np
import torch

from . import calls, compression as _compression, device
from .comm import Comm
from .executors import progress

__all__ = ["HookState", "as_array", "as_tensor", "collective", "comm_hook"]


def as_array(t):
    """The numpy (CPU) or cupy (CUDA) array sharing ``t``'s memory (a detached view)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a torch tensor, got {type(t).__name__}")
    t = t.detach()
    if t.device.type == "cuda":
        import cupy
        return cupy.from_dlpack(t)
    if t.device.type != "cpu":
        raise TypeError(f"pyar takes CPU and CUDA tensors, got one on {t.device}")
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def as_tensor(a):
    """The tensor sharing the numpy or cupy array ``a``'s memory."""
    if isinstance(a, np.ndarray):
        if a.dtype == ml_dtypes.bfloat16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)
    return torch.from_dlpack(a)


def collective(record, x, out, op, algorithm, comm, root, timeout, nonblocking):
    """``record``'s collective on tensors (arguments as :mod:`pyar.api`'s); a Request if
    ``nonblocking`` (its result a tensor)."""
    a = as_array(x)
    target = a if out is x else None if out is None else as_array(out)

    def back(result):
        if result is None:
            return None
        if result is target:
            return out
        if result is a:
            return x
        return as_tensor(result)

    if not isinstance(a, np.ndarray):
        return device.collective(record, a, target, op, algorithm, comm, root, timeout,
                                 nonblocking, then=back)
    run, lean = calls.build(record, a, target, op, algorithm, comm, root, timeout,
                            nonblocking, then=back)
    if nonblocking:
        return progress.start(run)
    return lean() if lean is not None else run.complete()


class HookState:
    """:func:`comm_hook`'s state: the communicator, the compression and its per-bucket state."""

    def __init__(self, comm=None, compression=None, timeout=None):
        self.comm = Comm.of(comm)
        self.transform = _compression.get(compression)
        self.timeout = timeout
        self.states: dict = {}        # bucket index -> compression State
        self.bytes_sent = 0

    def state(self, index: int, count: int):
        s = self.states.get(index)
        if s is None or (s.residual is not None and s.residual.size != count):
            s = self.states[index] = self.transform.state(count)   # (DDP rebuilds buckets)
        return s


def comm_hook(state, bucket) -> torch.futures.Future[torch.Tensor]:
    """Average a DDP bucket over the ranks with pyar (``state``: a :class:`HookState`, or None
    for COMM_WORLD, no compression); a completed future of the bucket's flat tensor."""
    if state is None:
        state = _default()
    buffer = bucket.buffer()
    a = as_array(buffer)
    c = state.comm
    if state.transform is None:
        from . import api
        api.allreduce(a, a, op="avg", comm=c, timeout=state.timeout)
        state.bytes_sent += _compression.sent_bytes("allreduce", a.size, a.dtype, c)
    else:
        t = state.transform
        gen = t.reduce(a, state.state(bucket.index(), a.size), c, state.timeout)
        try:
            request = next(gen)
            while True:
                request = gen.send(request.wait())
        except StopIteration as stop:
            a[...] = stop.value
        state.bytes_sent += t.wire_bytes(a.size, c)
    future = torch.futures.Future()
    future.set_result(buffer)
    return future


_DEFAULT: list = []


def _default():
    if not _DEFAULT:
        _DEFAULT.append(HookState())
    return _DEFAULT[0]

