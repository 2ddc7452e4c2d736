"""PyTorch interop (the ``torch`` extra): tensors in the collectives, and a DDP communication hook.

Every pyar collective takes torch tensors for ``x`` and ``out`` and returns
tensors: a CPU tensor is read and written through ``Tensor.numpy()`` (the
same memory, no copy; bfloat16 through an int16 view), a CUDA tensor through
DLPack as a cupy array (:mod:`pyar.runtime.device`); the result is ``out`` itself when
given, else a tensor sharing the result array's memory. :mod:`pyar.api` comes
here only for an ``x`` that is not a numpy array, so the numpy path pays
nothing.

:func:`comm_hook` is a ``DistributedDataParallel.register_comm_hook`` hook
that averages each DDP bucket with pyar (and a :mod:`pyar.compression`
transform, its error-feedback state kept per bucket)::

    ddp.register_comm_hook(pyar.torch.HookState(compression="fp16"), pyar.torch.comm_hook)

DDP still needs a process group for its set-up (it broadcasts the parameters
and checks their shapes across ranks when it is made): the pyar backend's
(:mod:`pyar.integrations.torch_backend`, ``init_process_group("pyar")``; pass ``HookState(comm=group.comm)`` to average on the
group's own communicator) or any other; with the hook and
``broadcast_buffers=False`` no gradient goes through it
(``tests/mpi/test_torch.py`` counts the collectives started through the group).
For one-phase transforms (none, fp16, bf16, top-k) the hook only launches the
average and returns a future that a helper thread completes, advancing the
request every 50 us (``Request.test``) until it is done, so backward goes on
meanwhile (as torch's hooks on gloo do); int8's two phases run blocking, on
autograd's thread, and its future is complete when returned.
"""

import torch

from ..core.buffers import as_array, as_tensor
from ..runtime.comm import Comm
from . import compression as _compression
from .buckets import Flight, average
from .poller import Poller

__all__ = ["HookState", "as_array", "as_tensor", "comm_hook"]


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
    for COMM_WORLD, no compression); a future of the bucket's flat tensor.

    With a one-phase transform (none, fp16, bf16, top-k) the average is launched and the
    future completed by a helper thread that advances it, so backward goes on meanwhile;
    otherwise (int8) the average runs here, blocking, and the future is complete."""
    if state is None:
        state = _default()
    buffer = bucket.buffer()
    a = as_array(buffer)
    c, t = state.comm, state.transform
    if t is None:
        flight = Flight(average(a, c, state.timeout))
        state.bytes_sent += _compression.sent_bytes("allreduce", a.size, a.dtype, c)
    else:
        flight = Flight(t.reduce(a, state.state(bucket.index(), a.size), c, state.timeout))
        state.bytes_sent += t.wire_bytes(a.size, c)
    future = torch.futures.Future()
    if t is None or t.phases == 1:
        _completer.add((flight, future, buffer, a))
    else:
        _finish(flight, future, buffer, a)
    return future


def _finish(flight, future, buffer, a) -> None:
    try:
        result = flight.wait()
        if result is not None:
            a[...] = result
    except BaseException as e:      # (DDP raises it from its wait on the future)
        future.set_exception(e)
        return
    future.set_result(buffer)


def _completed(item) -> bool:
    """The hooks' poller's pass over ``item`` (flight, future, buffer, array): its request
    advanced; finished once it is complete (or failed: the future gets its error)."""
    request = item[0].request
    if request is not None and not request.test():
        return False
    _finish(*item)
    return True


_completer = Poller("pyar-torch-hooks", _completed)
_DEFAULT: list = []


def _default():
    if not _DEFAULT:
        _DEFAULT.append(HookState())
    return _DEFAULT[0]
