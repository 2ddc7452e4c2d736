"""pyar as a ``torch.distributed`` backend: ``init_process_group("pyar")`` under mpiexec.

:func:`register` (run by ``import pyar.torch``) registers the backend ``"pyar"``
(``torch.distributed.Backend.register_backend``) and the rendezvous scheme
``pyar://``, and takes torch's ``env://`` over where ``MASTER_ADDR`` is unset; under
``mpiexec``::

    import torch.distributed as dist, pyar.torch
    dist.init_process_group("pyar")
    model = torch.nn.parallel.DistributedDataParallel(model)

The rank and world size are MPI's (``COMM_WORLD``); a ``rank`` or ``world_size`` passed
that disagrees is a ValueError on every rank. Under torch's default ``env://`` with
``MASTER_ADDR`` unset, rank 0 serves the TCP store on a port it picks and tells the others
over MPI (groups of other backends made later share it); with torchrun's variables set,
it is torch's own, and torch's ranks are checked against MPI's the same way, except under
torchrun with every worker an MPI job of one (``mpiexec -n 1``): there the workers join one
world through torch's store (:func:`_join`) and the ranks are torch's. ``pyar://``
needs no store, address or port: the group's store is a process-local ``HashStore``
(nothing of pyar uses it; torch code that exchanges keys through the store across ranks
does not work on it).

The process group, :class:`ProcessGroupPyar`, is a Python subclass of
``torch.distributed.ProcessGroup`` (torch takes one from a backend's creator as the group
itself). Each collective runs on pyar's own collectives (:mod:`pyar.api`) on the group's
:class:`pyar.Comm`; ``dist.new_group(ranks)`` makes a communicator of those ranks
(``MPI_Comm_create_group``, collective over the members only), and each default group
a duplicate of the world's. ``send``/``recv`` are MPI ``Isend``/``Irecv`` on a duplicate
of the group's communicator (from any source: ``MPI_ANY_SOURCE``). Tensors are read and
written in place through arrays sharing their memory (:func:`pyar.core.buffers.as_array`;
CPU through ``Tensor.numpy()``, CUDA through DLPack, untested: no GPU here); bool through
a uint8 view, SUM as logical or and PRODUCT as logical and (MIN, MAX as for uint8).

A dense CPU ``all_reduce`` of at most 512 KiB runs on the group's persistent requests kept
per signature (dtype, count, op: :mod:`.torch_requests`): a start and two copies of the
tensor a call.
The other collectives, with ``async_op=True`` (and every call DDP makes), start pyar's
nonblocking collective (a request set up for the call), else pyar's blocking call (its
cached request). An ``async_op=True`` call returns a :class:`PyarWork` at once; its
``get_future()`` is completed by a helper thread that advances the requests in flight
(``Request.test()``) every 50 us while any is pending, so DDP's bucket allreduces run
while backward computes; it stops at the interpreter's exit, after its pass in progress
(:class:`.poller.Poller`).
With ``PYAR_REPRODUCIBLE=1`` a float sum or average (``allreduce``,
``allreduce_coalesced``) is reproducible (:mod:`pyar.core.exact`: the same bits whatever
the algorithm and rank count) and blocking (its two phases one after the other): its work
is complete when returned.
The group's ``timeout`` (``init_process_group(timeout=...)``, torch's default 30 minutes)
is pyar's ``timeout=`` on every call; a pyar failure (a timeout, a mismatch between the
ranks' calls, a peer's failure) is raised as ``torch.distributed.DistBackendError`` with
pyar's message (which call, which rank, which step, which peer), from the call or from
``wait()``.

Costs beyond pyar's collective: ``gather`` is an allgather of which the root keeps the
blocks and ``scatter`` a broadcast of the root's stacked blocks (each rank receives ``N``
times a dedicated gather's or scatter's bytes); ``all_to_all_single`` with split sizes and
list ``alltoall`` first allgather every rank's counts (a blocking call: also the check that
the ranks' splits agree, a ValueError on every rank otherwise), then run one alltoall of
blocks padded to the largest count; list ``allgather``, ``reduce_scatter``,
``allreduce_coalesced`` and ``allgather_coalesced`` copy through one flat buffer; a sparse
``all_reduce`` (SUM) allgathers the counts, then the indices and values padded to the
largest, blocking. ``PREMUL_SUM`` and bitwise ops are not supported (a clear error). A group's MPI communicators
(its own, pyar's duplicate, the send/recv duplicate) stay allocated when torch destroys the
group: MPI frees a communicator only collectively, which torch's teardown does not promise.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.distributed.rendezvous import _rendezvous_handlers, register_rendezvous_handler

from .. import api
from ..core.buffers import as_array
from ..core.errors import PyarError, TimeoutError as PyarTimeout
from ..runtime.comm import Comm
from .poller import Poller
from .torch_requests import Requests, fits

__all__ = ["BACKEND", "ProcessGroupPyar", "PyarWork", "register"]

BACKEND = "pyar"

_OPS = [(dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "avg"),
        (dist.ReduceOp.PRODUCT, "prod"), (dist.ReduceOp.MIN, "min"),
        (dist.ReduceOp.MAX, "max")]
_BOOL_OPS = {"sum": "max", "prod": "min", "min": "min", "max": "max"}


def _op(op, dtype) -> str:
    """pyar's name of the torch ReduceOp ``op`` for tensors of ``dtype``; ValueError for
    what pyar does not reduce."""
    for theirs, ours in _OPS:
        if op == theirs:
            if dtype == torch.bool:
                if ours not in _BOOL_OPS:
                    raise ValueError(f"pyar backend: {ours} of bool tensors is not defined")
                return _BOOL_OPS[ours]
            return ours
    name = getattr(getattr(op, "op", op), "name", op)
    raise ValueError(f"pyar backend: reduce op {name} is not supported (SUM, AVG, PRODUCT, "
                     f"MIN, MAX are)")


def _array(t):
    """The array sharing ``t``'s memory (bool through uint8)."""
    return as_array(t.view(torch.uint8) if t.dtype == torch.bool else t)


def _one(tensors, what):
    if len(tensors) != 1:
        raise ValueError(f"pyar backend: {what} takes one tensor per process, got "
                         f"{len(tensors)}")
    return tensors[0]


def _apart(x, out):
    """``x``, or a copy of it where it shares memory with ``out`` (torch's in-place forms:
    the input a slice of the output, or the output itself)."""
    if x.numel() and out.numel() and \
            x.untyped_storage().data_ptr() == out.untyped_storage().data_ptr():
        return x.clone(memory_format=torch.contiguous_format)
    return x.contiguous()


def _same(tensors, what):
    """The common dtype and device of ``tensors``; ValueError if they differ."""
    kinds = {(t.dtype, t.device) for t in tensors}
    if len(kinds) > 1:
        raise ValueError(f"pyar backend: {what} needs tensors of one dtype and device, got "
                         f"{sorted(str(k) for k in kinds)}")


def _error(e: PyarError) -> dist.DistBackendError:
    """pyar's failure as torch's distributed error type, with pyar's message (a timeout's
    says "Timed out", as torch's own backends' do)."""
    kind = "Timed out (TimeoutError)" if isinstance(e, PyarTimeout) else type(e).__name__
    error = dist.DistBackendError(f"pyar: {kind}: {e}")
    error.__cause__ = e
    return error


class _Writable:
    """Where a collective writes a tensor's result: the tensor's own memory if it is
    contiguous, else a contiguous copy, copied back by :meth:`back`."""

    def __init__(self, t):
        self.tensor = t
        self.work = t if t.is_contiguous() else t.contiguous()
        self.array = _array(self.work)

    def back(self) -> None:
        if self.work is not self.tensor:
            self.tensor.copy_(self.work)


class _Pending:
    """An MPI request (send, recv) in the shape of a :class:`pyar.Request`; ``source``: the
    rank a completed receive came from."""

    def __init__(self, request, what):
        self.request, self.what, self.done = request, what, False
        self.status = MPI.Status()

    def test(self) -> bool:
        if not self.done:
            self.done = self.request.Test(self.status)
        return self.done

    @property
    def source(self) -> int:
        return self.status.Get_source()

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.test():
            if deadline is not None and time.monotonic() > deadline:
                raise PyarTimeout(f"{self.what} not complete after {timeout:.1f} s")
            time.sleep(0)


class PyarWork(dist.Work):
    """One call's work: pyar's request in flight (or nothing, when it ran blocking), what to
    do once it completes (``then``: copies out) and the future's value (``outputs``).

    ``wait()`` completes it on the calling thread; ``get_future()`` a future that the helper
    thread completes as soon as the request does (DDP's reducer waits on it). Thread-safe:
    whichever of the two completes it first runs ``then`` once."""

    def __init__(self, request, outputs, then=None, timeout=None):
        super().__init__()
        self._request, self._outputs, self._then = request, outputs, then
        self._timeout = timeout
        self._lock = threading.Lock()
        self._future = None
        self._failure = None
        self._finished = request is None
        if self._finished and then is not None:
            then()

    def _finish(self, failure=None) -> None:
        """Run ``then`` and settle the future, once (the request is complete or failed)."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            if failure is None and self._then is not None:
                try:
                    self._then()
                except Exception as e:      # (a copy-out failing: the work's failure)
                    failure = e
            self._failure = failure
            future = self._future
        if future is not None:
            self._settle(future)

    def _settle(self, future) -> None:
        if self._failure is not None:
            future.set_exception(self._failure)
        else:
            future.set_result(self._outputs)

    def _poll(self) -> bool:
        """Advance the request once; True once the work is finished (the helper's pass)."""
        if self._finished:
            return True
        try:
            if not self._request.test():
                return False
            self._request.wait()        # (complete: its result, or its error raised)
            failure = None
        except PyarError as e:
            failure = _error(e)
        except Exception as e:
            failure = e
        self._finish(failure)
        return True

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        """Block until complete (``timeout``: at most that long, 0 for the group's own); raise
        its failure (``DistBackendError`` for pyar's)."""
        if not self._finished:
            seconds = timeout.total_seconds() if timeout else self._timeout
            try:
                self._request.wait(seconds)
                failure = None
            except PyarError as e:
                failure = _error(e)
            except Exception as e:
                failure = e
            self._finish(failure)
        if self._failure is not None:
            raise self._failure
        return True

    def is_completed(self) -> bool:
        return self._poll()

    def is_success(self) -> bool:
        return self._poll() and self._failure is None

    def exception(self):
        return self._failure

    def result(self):
        return self._outputs

    def _source_rank(self) -> int:
        """The group rank a completed receive from any source came from (torch's
        ``dist.recv(t)`` and ``irecv(t)`` without ``src``)."""
        if not isinstance(self._request, _Pending) or not self._finished:
            raise ValueError("pyar backend: a source rank is a completed receive's")
        return self._request.source

    def get_future(self) -> torch.futures.Future:
        """A future of the output tensors, completed as soon as the request completes."""
        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                if self._finished:
                    self._settle(self._future)
                else:
                    _helper.add(self)
            return self._future


_helper = Poller("pyar-torch-works", PyarWork._poll)     # (futures asked for)


class ProcessGroupPyar(dist.ProcessGroup):
    """A torch process group whose collectives are pyar's, on the MPI communicator ``mpi``
    (its ranks are the group's); ``timeout``: seconds every call may wait (None: for ever).
    Made by the backend's creator (``init_process_group``, ``new_group``); ``comm`` is the
    group's :class:`pyar.Comm` (``pyar.torch.HookState(comm=group.comm)``); ``calls`` counts
    the collectives started through the group (not sends and receives)."""

    def __init__(self, mpi: MPI.Comm, timeout: float | None = None):
        super().__init__(mpi.Get_rank(), mpi.Get_size())
        self.comm = Comm.of(mpi)
        self.requests = Requests(self.comm, timeout)
        self.p2p = mpi.Dup()
        self.p2p.Set_name("pyar torch send/recv")
        self.timeout = timeout
        self.calls = 0
        self._size = mpi.Get_size()
        self._group_name = self._group_desc = ""

    def getBackendName(self) -> str:
        return BACKEND

    def name(self) -> str:
        return BACKEND

    # torch names a group after making it (``group.group_name``: DeviceMesh, FSDP); a
    # Python group keeps the names itself
    def setGroupName(self, name: str) -> None:
        self._group_name = name

    def getGroupName(self) -> str:
        return self._group_name

    def setGroupDesc(self, desc: str) -> None:
        self._group_desc = desc

    def getGroupDesc(self) -> str:
        return self._group_desc

    # -- running a call -------------------------------------------------------------------

    def _run(self, opts, call, outputs, then=None, blocking=False) -> PyarWork:
        """``call(nonblocking)`` (pyar's call; a Request when nonblocking) as a work: blocking
        if ``blocking`` or not ``opts.asyncOp`` (absent: nonblocking); pyar's failures as
        DistBackendError."""
        nonblocking = getattr(opts, "asyncOp", True) and not blocking
        self.calls += 1
        try:
            if not nonblocking:
                call(False)
                return PyarWork(None, outputs, then)
            return PyarWork(call(True), outputs, then, self.timeout)
        except PyarError as e:
            raise _error(e) from e

    def _kw(self):
        return {"comm": self.comm, "timeout": self.timeout}

    # -- the collectives ------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        t = _one(tensors, "allreduce")
        if t.is_sparse:
            return self._sparse_allreduce(t, opts)
        op = _op(opts.reduceOp, t.dtype)
        if fits(t) and not api.reproduces(None, t, op):
            self.calls += 1
            try:
                request = self.requests.allreduce(t, op, getattr(opts, "asyncOp", True))
            except PyarError as e:
                raise _error(e) from e
            return PyarWork(request, [t], None, self.timeout)
        target = _Writable(t)
        a = target.array

        def call(nb):
            return (api.iallreduce if nb else api.allreduce)(a, a, op=op, **self._kw())
        return self._run(opts, call, [t], target.back, blocking=api.reproduces(None, a, op))

    def _sparse_allreduce(self, t, opts) -> PyarWork:
        """The SUM of sparse COO tensors (as gloo's, the only op): every rank's indices and
        values allgathered (blocking: the counts first, then blocks padded to the largest),
        summed here and written into ``t`` (its coalesced form)."""
        if opts.reduceOp != dist.ReduceOp.SUM:
            raise ValueError("pyar backend: sparse tensors are reduced with SUM only")
        s = t.coalesce()
        idx, val = s.indices().contiguous(), s.values().contiguous()
        try:
            counts = api.allgather(np.array([idx.shape[1]], np.int64), **self._kw())
            counts = [int(c) for c in counts.reshape(-1)]
            width = max(counts)
            pad_idx = torch.zeros((idx.shape[0], width), dtype=idx.dtype)
            pad_val = torch.zeros((width, *val.shape[1:]), dtype=val.dtype)
            pad_idx[:, :idx.shape[1]] = idx
            pad_val[:val.shape[0]] = val
            got_idx = torch.empty((self._size, *pad_idx.shape), dtype=idx.dtype)
            got_val = torch.empty((self._size, *pad_val.shape), dtype=val.dtype)
            if width:
                api.allgather(_array(pad_idx), _array(got_idx), **self._kw())
                api.allgather(_array(pad_val), _array(got_val), **self._kw())
        except PyarError as e:
            raise _error(e) from e
        self.calls += 1
        total = torch.sparse_coo_tensor(
            torch.cat([got_idx[r, :, :c] for r, c in enumerate(counts)], dim=1),
            torch.cat([got_val[r, :c] for r, c in enumerate(counts)]), t.shape)
        t.copy_(total.coalesce())
        return PyarWork(None, [t])

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        if not tensors:
            return PyarWork(None, [])
        _same(tensors, "allreduce_coalesced")
        op = _op(opts.reduceOp, tensors[0].dtype)
        flat = torch.cat([t.reshape(-1) for t in tensors])
        a = _array(flat)

        def then():
            at = 0
            for t in tensors:
                t.copy_(flat[at:at + t.numel()].view(t.shape))
                at += t.numel()

        def call(nb):
            return (api.iallreduce if nb else api.allreduce)(a, a, op=op, **self._kw())
        return self._run(opts, call, tensors, then, blocking=api.reproduces(None, a, op))

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        t = _one(tensors, "broadcast")
        target = _Writable(t)
        a, root = target.array, opts.rootRank

        def call(nb):
            return (api.ibcast if nb else api.bcast)(a, root=root, **self._kw())
        return self._run(opts, call, [t], target.back)

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        x = _one(input_tensors, "allgather")
        outs = _one(output_tensors, "allgather")
        self._check_list(outs, x, "allgather's output list")
        return self._gathered(opts, x, outs)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        n = self._size
        if len(output_lists) != n or any(
                len(outs) != len(input_tensors) or
                any(o.shape != x.shape or o.dtype != x.dtype
                    for o, x in zip(outs, input_tensors)) for outs in output_lists):
            raise ValueError(f"pyar backend: all_gather_coalesced needs {n} output lists, "
                             f"each of tensors of the inputs' shapes and dtypes")
        outputs = [o for outs in output_lists for o in outs]
        if not input_tensors:
            return PyarWork(None, outputs)
        _same(input_tensors, "all_gather_coalesced")
        flat = torch.cat([t.reshape(-1) for t in input_tensors])
        if not flat.numel():
            return PyarWork(None, outputs)
        gathered = torch.empty((n, flat.numel()), dtype=flat.dtype, device=flat.device)
        a, out = _array(flat), _array(gathered)

        def then():
            for r, outs in enumerate(output_lists):
                at = 0
                for o in outs:
                    o.copy_(gathered[r, at:at + o.numel()].view(o.shape))
                    at += o.numel()

        def call(nb):
            return (api.iallgather if nb else api.allgather)(a, out, **self._kw())
        return self._run(opts, call, outputs, then)

    def _gathered(self, opts, x, outs):
        """Every rank's ``x`` allgathered into one flat tensor, then copied into ``outs`` (the
        list of ``N`` tensors; empty where the rank keeps nothing: gather's non-roots)."""
        flat = torch.empty((self._size, *x.shape), dtype=x.dtype, device=x.device)
        a, out = _array(x), _array(flat)

        def then():
            for i, o in enumerate(outs):
                o.copy_(flat[i])

        def call(nb):
            return (api.iallgather if nb else api.allgather)(a, out, **self._kw())
        return self._run(opts, call, [outs] if outs else [], then)

    def _allgather_base(self, output, input, opts=None):
        opts = opts or dist.AllgatherOptions()
        if output.numel() != self._size * input.numel() or output.dtype != input.dtype:
            raise ValueError(f"pyar backend: all_gather_into_tensor needs an output of "
                             f"{self._size} x {input.numel()} elements of {input.dtype}, got "
                             f"{output.numel()} of {output.dtype}")
        target = _Writable(output)
        a = _array(_apart(input, output))
        out = target.array.reshape(self._size, *a.shape)

        def call(nb):
            return (api.iallgather if nb else api.allgather)(a, out, **self._kw())
        return self._run(opts, call, [output], target.back)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        out = _one(output_tensors, "reduce_scatter")
        ins = _one(input_tensors, "reduce_scatter")
        self._check_list(ins, out, "reduce_scatter's input list")
        op = _op(opts.reduceOp, out.dtype)
        flat = torch.cat([t.reshape(-1) for t in ins])
        target = _Writable(out)
        a, o = _array(flat), target.array.reshape(-1)

        def call(nb):
            return (api.ireduce_scatter if nb else api.reduce_scatter)(a, o, op=op,
                                                                        **self._kw())
        return self._run(opts, call, [out], target.back)

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        if input.numel() != self._size * output.numel() or output.dtype != input.dtype:
            raise ValueError(f"pyar backend: reduce_scatter_tensor needs an input of "
                             f"{self._size} x {output.numel()} elements of {output.dtype}, "
                             f"got {input.numel()} of {input.dtype}")
        op = _op(opts.reduceOp, output.dtype)
        target = _Writable(output)
        a, o = _array(_apart(input, output)).reshape(-1), target.array.reshape(-1)

        def call(nb):
            return (api.ireduce_scatter if nb else api.reduce_scatter)(a, o, op=op,
                                                                        **self._kw())
        return self._run(opts, call, [output], target.back)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        t = _one(tensors, "reduce")
        op, target, root = _op(opts.reduceOp, t.dtype), _Writable(t), opts.rootRank
        a = target.array

        def call(nb):
            return (api.ireduce if nb else api.reduce)(a, a, root=root, op=op, **self._kw())
        return self._run(opts, call, [t], target.back)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        n = self._size
        if output.dtype != input.dtype:
            raise ValueError(f"pyar backend: all_to_all_single needs one dtype, got "
                             f"{input.dtype} in and {output.dtype} out")
        if not output_split_sizes and not input_split_sizes:
            if input.numel() % n or output.numel() != input.numel():
                raise ValueError(f"pyar backend: all_to_all_single without split sizes "
                                 f"needs input and output of equal size divisible by {n}, "
                                 f"got {input.numel()} and {output.numel()} elements")
            target = _Writable(output)
            a = _array(_apart(input, output)).reshape(n, -1)
            o = target.array.reshape(n, -1)

            def call(nb):
                return (api.ialltoall if nb else api.alltoall)(a, o, **self._kw())
            return self._run(opts, call, [output], target.back)
        sent = self._counts(input, input_split_sizes, "input")
        got = self._counts(output, output_split_sizes, "output")
        target = _Writable(output)
        return self._alltoallv(opts, _apart(input, output).reshape(-1), sent, target, got,
                               [output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllToAllOptions()
        n = self._size
        if len(output_tensors) != n or len(input_tensors) != n:
            raise ValueError(f"pyar backend: all_to_all needs {n} input and {n} output "
                             f"tensors, got {len(input_tensors)} and {len(output_tensors)}")
        _same(list(input_tensors) + list(output_tensors), "all_to_all")
        flat_in = torch.cat([t.reshape(-1) for t in input_tensors])
        flat_out = torch.empty(sum(t.numel() for t in output_tensors), dtype=flat_in.dtype,
                               device=flat_in.device)
        target = _Writable(flat_out)

        def then():
            at = 0
            for t in output_tensors:
                t.copy_(flat_out[at:at + t.numel()].view(t.shape))
                at += t.numel()
        return self._alltoallv(opts, flat_in, [t.numel() for t in input_tensors], target,
                               [t.numel() for t in output_tensors], output_tensors, then)

    def _counts(self, t, splits, which):
        """Element counts per rank of ``t`` cut along dim 0 by ``splits`` (rows)."""
        n = self._size
        rows = t.shape[0] if t.dim() else 1
        row = t.numel() // rows if rows else 0
        splits = list(splits) if splits else [rows // n] * n
        if len(splits) != n or sum(splits) != rows or any(s < 0 for s in splits):
            raise ValueError(f"pyar backend: all_to_all_single's {which} split sizes {splits} "
                             f"must be {n} counts >= 0 summing to its {rows} rows")
        return [s * row for s in splits]

    def _alltoallv(self, opts, flat_in, sent, target, got, outputs, after=None):
        """An alltoall of uneven blocks: every rank's counts allgathered (blocking; checked to
        agree: a ValueError on every rank), then one alltoall of blocks padded to the
        largest."""
        n = self._size
        mine = np.array([sent, got], np.int64)
        try:
            every = api.allgather(mine, **self._kw())       # (n, 2, n)
        except PyarError as e:
            raise _error(e) from e
        sends, wants = every[:, 0, :], every[:, 1, :]
        wrong = np.argwhere(sends != wants.T)
        if wrong.size:
            i, j = (int(v) for v in wrong[0])
            raise ValueError(f"pyar backend: all_to_all split sizes disagree: rank {i} sends "
                             f"{sends[i, j]} elements to rank {j}, which expects "
                             f"{wants[j, i]} ({len(wrong)} such pairs)")
        width = int(sends.max()) if sends.size else 0
        if width == 0:
            return PyarWork(None, outputs, after)
        x = torch.zeros((n, width), dtype=flat_in.dtype, device=flat_in.device)
        y = torch.empty((n, width), dtype=flat_in.dtype, device=flat_in.device)
        at = 0
        for j, c in enumerate(sent):
            x[j, :c] = flat_in[at:at + c]
            at += c
        a, o, out = _array(x), _array(y), target.work.reshape(-1)

        def then():
            at = 0
            for i, c in enumerate(got):
                out[at:at + c] = y[i, :c]
                at += c
            target.back()
            if after is not None:
                after()

        def call(nb):
            return (api.ialltoall if nb else api.alltoall)(a, o, **self._kw())
        return self._run(opts, call, outputs, then)

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        x = _one(input_tensors, "gather")
        root = opts.rootRank
        outs = _one(output_tensors, "gather") if self.rank() == root else []
        if self.rank() == root:
            self._check_list(outs, x, "gather's output list")
        elif output_tensors:
            raise ValueError("pyar backend: gather's output list is for the root only")
        return self._gathered(opts, x, outs)

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ScatterOptions()
        t = _one(output_tensors, "scatter")
        root = opts.rootRank
        flat = torch.empty((self._size, *t.shape), dtype=t.dtype, device=t.device)
        if self.rank() == root:
            ins = _one(input_tensors, "scatter")
            self._check_list(ins, t, "scatter's input list")
            for i, s in enumerate(ins):
                flat[i].copy_(s)
        elif input_tensors:
            raise ValueError("pyar backend: scatter's input list is for the root only")
        a, me = _array(flat), self.rank()

        def then():
            t.copy_(flat[me])

        def call(nb):
            return (api.ibcast if nb else api.bcast)(a, root=root, **self._kw())
        return self._run(opts, call, [t], then)

    def barrier(self, opts=None):
        def call(nb):
            return (api.ibarrier if nb else api.barrier)(**self._kw())
        return self._run(opts, call, [])

    def _check_list(self, tensors, like, what):
        if len(tensors) != self._size or any(
                t.shape != like.shape or t.dtype != like.dtype for t in tensors):
            raise ValueError(f"pyar backend: {what} must be {self._size} tensors of shape "
                             f"{tuple(like.shape)} and dtype {like.dtype}")

    # torch 2.13 calls these names (dist.all_gather_into_tensor, reduce_scatter_tensor,
    # all_to_all_single); the older ones stay for code that calls them directly
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base

    # -- point to point -------------------------------------------------------------------

    def send(self, tensors, dstRank, tag=0):
        t = _one(tensors, "send").contiguous()
        request = self.p2p.Isend([_array(t).view(np.uint8).reshape(-1), MPI.BYTE], dstRank,
                                 tag)
        return PyarWork(_Pending(request, f"send to rank {dstRank}"), [t], None, self.timeout)

    def recv(self, tensors, srcRank, tag=0):
        t = _one(tensors, "recv")
        target = _Writable(t)
        request = self.p2p.Irecv([target.array.view(np.uint8).reshape(-1), MPI.BYTE],
                                 srcRank, tag)
        return PyarWork(_Pending(request, f"recv from rank {srcRank}"), [t], target.back,
                        self.timeout)

    def recv_anysource(self, tensors, tag=0):
        t = _one(tensors, "recv")
        target = _Writable(t)
        request = self.p2p.Irecv([target.array.view(np.uint8).reshape(-1), MPI.BYTE],
                                 MPI.ANY_SOURCE, tag)
        return PyarWork(_Pending(request, "recv from any source"), [t], target.back,
                        self.timeout)


def _seconds(timeout) -> float | None:
    return None if timeout is None else timeout.total_seconds()


def _agree(comm: MPI.Comm, problem: str | None) -> None:
    """Raise ``problem`` (a ValueError) on every rank of ``comm`` if any rank has one."""
    problems = comm.allgather(problem)
    found = [(r, p) for r, p in enumerate(problems) if p]
    if found:
        raise ValueError("; ".join(f"rank {r}: {p}" for r, p in found))


_joined: list = []          # the world torchrun's workers joined (one at most)
# What an MPI launcher sets in the environment of its processes (MPICH's hydra, PMIx, Open MPI)
_LAUNCHED = ("PMI_RANK", "PMI_FD", "PMI_PORT", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")


def _world(options) -> MPI.Comm:
    """The communicator whose ranks are torch's global ranks: COMM_WORLD; or, where this
    process is an MPI job of one and torch's world is larger (torchrun's workers, each
    started as ``mpiexec -n 1``), the world the workers join through torch's store
    (:func:`_join`, once per process). A worker that no MPI launcher started (an MPI
    singleton: MPICH's cannot connect to each other) is a ValueError naming the fix."""
    if _joined:
        return _joined[0]
    world = MPI.COMM_WORLD
    if world.Get_size() > 1 or options.group_size == 1 or options.global_ranks_in_group:
        return world
    if not any(v in os.environ for v in _LAUNCHED):
        raise ValueError(f"pyar backend: torch has {options.group_size} ranks but this "
                         f"process is an MPI singleton (no mpiexec started it); start each "
                         f"worker as an MPI job of its own (torchrun --no-python ... mpiexec "
                         f"-n 1 python train.py), or every rank under one mpiexec")
    _joined.append(_join(options.store, options.group_rank, options.group_size))
    return _joined[0]


def _join(store, rank: int, size: int) -> MPI.Comm:
    """The communicator of ``size`` processes, each an MPI job of one, in the order of
    their ``rank`` (torch's): rank 0 opens an MPI port and puts its name in ``store``; rank
    ``r``, once rank ``r - 1`` has joined, says so in the store and connects, and the ranks
    joined so far accept it together (``MPI_Comm_accept``/``connect``, then
    ``MPI_Intercomm_merge``). Each wait on the store is bounded by its timeout; a connect
    follows the store's word that the peer is connecting."""
    key, comm = "pyar-join", MPI.COMM_SELF
    port = MPI.Open_port() if rank == 0 else None
    if rank == 0:
        store.set(f"{key}/port", port)
    else:
        if rank > 1:
            store.wait([f"{key}/joined/{rank - 1}"])
        port = store.get(f"{key}/port").decode()
        store.set(f"{key}/connecting/{rank}", "1")
        inter = comm.Connect(port)
        comm = inter.Merge(high=True)
        inter.Free()
        store.set(f"{key}/joined/{rank}", "1")
    for r in range(rank + 1, size):
        store.wait([f"{key}/connecting/{r}"])
        inter = comm.Accept(port if rank == 0 else "", root=0)
        merged = inter.Merge(high=False)
        inter.Free()
        if comm is not MPI.COMM_SELF:
            comm.Free()
        comm = merged
    if rank == 0:
        MPI.Close_port(port)
    world = comm.Split(0, rank)
    if comm is not MPI.COMM_SELF:
        comm.Free()
    return world


def _create(options, _backend_options=None) -> ProcessGroupPyar:
    """The backend's creator (``extended_api``): the default group on a duplicate of the
    world (:func:`_world`), or a new group's communicator of its global ranks (collective
    over them only)."""
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:    # (the helper thread calls MPI too)
        raise ValueError("the pyar backend needs MPI_THREAD_MULTIPLE; this MPI was "
                         "initialized with less (mpi4py.rc.thread_level)")
    world = _world(options)
    ranks = list(options.global_ranks_in_group)
    if ranks:
        whole = world.Get_group()
        members = whole.Incl(ranks)
        mpi = world.Create_group(members)
        members.Free()
        whole.Free()
    else:
        mpi = world.Dup()       # (a group of its own: a failed group's state stays its own)
    problem = None
    if (options.group_rank, options.group_size) != (mpi.Get_rank(), mpi.Get_size()):
        problem = (f"torch gave rank {options.group_rank} of {options.group_size}, MPI has "
                   f"rank {mpi.Get_rank()} of {mpi.Get_size()} (under mpiexec the pyar "
                   f"backend takes MPI's: use init_method='pyar://' and pass neither)")
    _agree(mpi, problem)
    return ProcessGroupPyar(mpi, _seconds(options.timeout))


def _mpi_ranks(url: str) -> MPI.Comm:
    """COMM_WORLD, once every rank has checked that the ``rank`` and ``world_size`` in
    ``url``'s query (init_process_group's, if passed) are MPI's (else a ValueError on every
    rank, naming both)."""
    world = MPI.COMM_WORLD
    query = {k: int(v[0]) for k, v in parse_qs(urlparse(url).query).items()
             if k in ("rank", "world_size")}
    problem = None
    if query.get("rank", world.rank) != world.rank or \
            query.get("world_size", world.size) != world.size:
        problem = (f"init_process_group got rank {query.get('rank')} and world_size "
                   f"{query.get('world_size')}, but MPI runs this process as rank "
                   f"{world.rank} of {world.size} (under mpiexec the ranks are MPI's: "
                   f"pass neither)")
    _agree(world, problem)
    return world


def _rendezvous(url: str, timeout=None, **kwargs):
    """``pyar://``: the rank and world size of MPI's COMM_WORLD, a process-local store."""
    world = _mpi_ranks(url)
    yield dist.HashStore(), world.rank, world.size
    raise RuntimeError("pyar:// cannot rendezvous again (MPI's ranks do not change)")


def _env_rendezvous(url: str, timeout=timedelta(minutes=30), **kwargs):
    """``env://``, torch's default ``init_method``: torch's own where ``MASTER_ADDR`` is set
    (torchrun's variables); else, under mpiexec, MPI's rank and world size and a TCP store
    served by rank 0 on a port it picked (on the loopback where every rank shares its node,
    else on its host name), told to the others over MPI: ``init_process_group("pyar")``
    needs nothing more, and groups of other backends made later (gloo's) share the store."""
    if os.environ.get("MASTER_ADDR"):
        return (yield from _torch_env(url, timeout=timeout, **kwargs))
    world = _mpi_ranks(url)
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    host = "127.0.0.1" if node.Get_size() == world.size else socket.gethostname()
    node.Free()
    store = None
    if world.rank == 0:
        store = dist.TCPStore(host, 0, world.size, True, timeout, wait_for_workers=False)
    host, port = world.bcast((host, store.port) if store else None)
    if store is None:
        store = dist.TCPStore(host, port, world.size, False, timeout)
    yield store, world.rank, world.size
    raise RuntimeError("env:// through MPI cannot rendezvous again (MPI's ranks do not "
                       "change)")


_registered: list = []
_torch_env = _rendezvous_handlers["env"]        # torch's env:// (MASTER_ADDR set)


def register() -> None:
    """Register the backend ``"pyar"`` (CPU, and CUDA through DLPack) and the rendezvous
    scheme ``pyar://`` with torch.distributed (once; again is a no-op)."""
    if _registered:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True,
                                  devices=["cpu", "cuda"])
    register_rendezvous_handler("pyar", _rendezvous)
    # torch has no public way to replace a scheme's handler: its table, by hand (torch pinned)
    _rendezvous_handlers["env"] = _env_rendezvous
    _registered.append(True)
