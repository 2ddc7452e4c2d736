"""Gradient buckets: DDP's bucketing and overlap, over pyar's nonblocking allreduce.

``GradientBuckets(grads)`` packs the gradient arrays, in reverse registration
order (the order backward produces them), into flat buckets of at most
``bucket_cap_mb`` MiB each, one dtype per bucket (an array larger than the cap
has a bucket of its own). ``ready(i)`` says gradient ``i`` is final; once every
gradient of a bucket is, and every bucket before it has been launched, the
bucket is packed and its average launched (``pyar.iallreduce(op="avg")``, or
the phases of a compression transform, :mod:`pyar.compression`), so the
communication overlaps the rest of backward (with a progress thread,
``pyar.Progress()`` or ``PYAR_PROGRESS_THREAD=1``, it advances while the
caller computes; a transform's later phases, e.g. int8's allgather, start in
``wait()``, bucket by bucket, so that every rank starts them in the same
order). ``wait()`` completes every bucket and writes the averages
back into the arrays. With ``views=True`` the buckets own the memory:
``buckets.grads[i]`` is a view into its flat bucket that backward should write,
and nothing is packed or unpacked.

Buckets launch in the same order on every rank whatever order ``ready`` is
called in. Ranks whose gradients differ (count, shapes, dtypes, cap,
compression) raise :class:`pyar.MismatchError` on every rank when the buckets
are made; a gradient marked ready twice in a step is a ValueError at once; one
never marked ready by ``wait()`` (an unused parameter) is a ValueError after
the step's remaining buckets have run, so the other ranks do not hang.

Cost per step: the allreduces of the buckets (float32: ``2(N-1)/N`` of the
gradients' bytes with ring), one copy in and one out per gradient (none with
``views=True``); the compressions cut the bytes as :mod:`pyar.compression` says;
``reproducible=True`` (or ``PYAR_REPRODUCIBLE=1``) averages each bucket in two phases of
integers (:mod:`pyar.core.exact`: 4.5x float32's bytes), the same bits whatever the
algorithm and the rank count.
"""

from __future__ import annotations

import sys
import zlib

import numpy as np

from .. import api
from ..core import exact, ops
from ..core.buffers import as_array, as_tensor, is_torch
from ..core.errors import MismatchError
from ..runtime import settings
from ..runtime.comm import Comm
from . import compression as _compression

__all__ = ["GradientBuckets"]

MiB = 1 << 20


class GradientBuckets:
    """Buckets over the gradient arrays ``grads`` (numpy, cupy, or torch tensors).

    Args:
        grads: the gradient arrays, in registration (forward) order; floating dtypes.
        bucket_cap_mb: a bucket's size limit in MiB (DDP's default: 25).
        comm: an mpi4py communicator, a :class:`pyar.Comm`, or None (COMM_WORLD).
        compression: None, ``"fp16" "bf16" "int8" "topk:RATIO"`` or a
            :class:`pyar.compression.Transform` (host buckets only); its state is kept per bucket.
        views: the buckets own the memory and ``grads[i]`` become views into them.
        timeout: seconds any wait of a bucket's collectives may take (else ``PYAR_TIMEOUT``).
        reproducible: average each bucket reproducibly (:mod:`pyar.core.exact`: the same
            bits whatever the algorithm and rank count; two phases, 4.5x float32's bytes);
            None: ``PYAR_REPRODUCIBLE``. Not with a compression.
    """

    def __init__(self, grads, bucket_cap_mb: float = 25, comm=None, compression=None,
                 views: bool = False, timeout=None, reproducible=None):
        self.comm = Comm.of(comm)
        self.timeout = timeout
        self.reproducible = bool(settings.current().reproducible if reproducible is None
                                 else reproducible)
        try:            # refused here: refused on every rank (the others would wait for it)
            grads = list(grads)
            arrays = self._checked(grads, bucket_cap_mb, compression)
            refused = None
        except (TypeError, ValueError) as e:
            arrays, refused = None, e
        self._agree(arrays, bucket_cap_mb, refused)

        # reverse registration order, one open bucket per dtype, closed once at the cap
        cap = bucket_cap_mb * MiB
        members, sizes, dtypes, place = [], [], [], [None] * len(arrays)
        open_bucket: dict = {}
        for i in reversed(range(len(arrays))):
            a = arrays[i]
            b = open_bucket.get(a.dtype)
            if b is None:
                b = open_bucket[a.dtype] = len(members)
                members.append([])
                sizes.append(0)
                dtypes.append(a.dtype)
            place[i] = (b, sizes[b])
            members[b].append(i)
            sizes[b] += a.size
            if sizes[b] * a.dtype.itemsize >= cap:
                del open_bucket[a.dtype]
        xp = _module(arrays[0])
        self.flat = [xp.empty(n, d) for n, d in zip(sizes, dtypes)]   # every element packed
        self.members = members
        self.bucket_of = [b for b, _ in place]
        views_of = [self.flat[b][lo:lo + a.size].reshape(a.shape)
                    for (b, lo), a in zip(place, arrays)]
        if views:
            for view, a in zip(views_of, arrays):
                view[...] = a
            self._arrays = views_of
            self.grads = [_like(g, view) for g, view in zip(grads, views_of)]
        else:
            self._arrays, self.grads = arrays, grads
        self.views = bool(views)
        self._views = views_of
        self.states = [None if self.transform is None else self.transform.state(n)
                       for n in sizes]
        self.wire_bytes = [self._wire(n, d) for n, d in zip(sizes, dtypes)]
        self.bytes_sent = 0           # by this rank, over all steps so far
        self._reset()

    def _checked(self, grads, bucket_cap_mb, compression) -> list:
        """The gradients as numpy or cupy arrays (sharing their memory), after the local
        checks; sets the transform."""
        arrays = [_array(g, i) for i, g in enumerate(grads)]
        if not arrays:
            raise ValueError("GradientBuckets needs at least one gradient array")
        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) \
                or not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be a number > 0, got {bucket_cap_mb!r}")
        self.transform = _compression.get(compression)
        if self.transform is not None and self.reproducible:
            raise ValueError(f"reproducible=True averages exactly; a compression changes the "
                             f"values first: pass compression=None (got {self.transform})")
        xp = _module(arrays[0])
        for i, a in enumerate(arrays):
            if not ops.is_float(a.dtype):
                raise TypeError(f"gradient {i} has dtype {a.dtype}; gradients are averaged, so "
                                f"they must be floating (float16, bfloat16, float32, float64)")
            if _module(a) is not xp:
                raise TypeError(f"gradient {i} is a {type(a).__name__}, gradient 0 a "
                                f"{type(arrays[0]).__name__}: all must live in the same memory")
        if self.transform is not None and xp is not np:
            raise TypeError("compression runs on host buckets (numpy, CPU torch tensors); "
                            "pass compression=None for device arrays")
        return arrays

    def __len__(self):
        return len(self.flat)

    def __repr__(self):
        return (f"<pyar.GradientBuckets: {len(self.grads)} gradients in {len(self)} buckets "
                f"({', '.join(f'{f.size} {f.dtype}' for f in self.flat)}), "
                f"compression {self.transform}{', reproducible' if self.reproducible else ''}>")

    @property
    def bytes_per_step(self) -> int:
        """Bytes this rank sends per step (counted from the collectives' schedules)."""
        return sum(self.wire_bytes)

    def ready(self, i: int) -> None:
        """Gradient ``i`` is final for this step (it must not change until ``wait()``)."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or \
                not 0 <= i < len(self.grads):
            raise ValueError(f"ready() takes a gradient index in [0, {len(self.grads)}), "
                             f"got {i!r}")
        if self._ready[i]:
            raise ValueError(f"gradient {i} marked ready twice in one step (wait() ends a step)")
        self._ready[i] = True
        b = self.bucket_of[i]
        self._pending[b] -= 1
        if self._pending[b] == 0:
            self._launch_ready()

    def wait(self) -> None:
        """Complete every bucket of this step and write the averages into the gradients."""
        missing = [i for i, r in enumerate(self._ready) if not r]
        if missing:                       # launch the rest all the same: the others wait on them
            for b in range(self._next, len(self.flat)):
                self._launch(b)
            self._next = len(self.flat)
        try:
            for b, flight in enumerate(self._flights):
                result = flight.wait()
                if result is not None:
                    self.flat[b][...] = result
                if not self.views:
                    for i in self.members[b]:
                        self._arrays[i][...] = self._views[i]
        finally:
            self._reset()
        if missing:
            listed = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            raise ValueError(f"gradient{'s' if len(missing) > 1 else ''} {listed} not marked "
                             f"ready in this step (unused parameters? mark them ready with a "
                             f"zero gradient); their buckets ran with the values they had")

    def _reset(self):
        self._ready = [False] * len(self.grads)
        self._pending = [len(m) for m in self.members]
        self._flights = [None] * len(self.flat)
        self._next = 0

    def _launch_ready(self):
        while self._next < len(self.flat) and self._pending[self._next] == 0:
            self._launch(self._next)
            self._next += 1

    def _launch(self, b: int) -> None:
        flat = self.flat[b]
        if not self.views:
            for i in self.members[b]:
                self._views[i][...] = self._arrays[i]
        if self.transform is None:
            flight = Flight(average(flat, self.comm, self.timeout, self.reproducible))
        else:
            flight = Flight(self.transform.reduce(flat, self.states[b], self.comm,
                                                   self.timeout))
        self._flights[b] = flight
        self.bytes_sent += self.wire_bytes[b]

    def _wire(self, count, dtype) -> int:
        if self.reproducible:           # (pyar.core.exact's phases: exponents, limbs)
            return _compression.sent_bytes("allreduce", count, np.int16, self.comm) + \
                _compression.sent_bytes("allreduce", 2 * count, np.int64, self.comm)
        if self.transform is None:
            return _compression.sent_bytes("allreduce", count, dtype, self.comm)
        return self.transform.wire_bytes(count, self.comm)

    def _agree(self, arrays, cap, refused) -> None:
        """Raise on every rank unless every rank's arguments passed their checks (``refused``:
        this rank's error) and every rank registered the same buckets (MismatchError)."""
        layout = "" if refused else repr(([(a.shape, a.dtype.str) for a in arrays],
                                          float(cap), repr(self.transform),
                                          self.reproducible))
        mine = np.array([refused is None, 0 if refused else len(arrays),
                         zlib.crc32(layout.encode())], np.int64)
        every = api.allgather(mine, comm=self.comm, timeout=self.timeout)
        if refused is not None:
            raise refused
        bad = [r for r in range(self.comm.size) if not every[r][0]]
        if bad:
            raise ValueError(f"rank {bad[0]}'s GradientBuckets arguments were refused there; "
                             f"its error says why")
        differ = [r for r in range(self.comm.size) if not np.array_equal(every[r], every[0])]
        if differ:
            raise MismatchError(
                f"ranks registered different gradients, bucket caps, compressions or "
                f"reproducible=: rank "
                f"{differ[0]} differs from rank 0 ({every[differ[0]][1]} arrays against "
                f"{every[0][1]}; here, rank {self.comm.rank}: {len(arrays)})")


def average(flat, comm, timeout, reproducible=False):
    """Generator: a bucket's average, in place: one nonblocking allreduce, or the phases of a
    reproducible one (:func:`pyar.core.exact.reduction`), each a nonblocking allreduce."""
    if not reproducible:
        yield api.iallreduce(flat, flat, op="avg", comm=comm, timeout=timeout)
        return None                       # in place: nothing to copy
    phases = exact.reduction(flat, comm.size)
    contribution, op = next(phases)
    try:
        while True:
            total = yield api.iallreduce(contribution, contribution, op=op, comm=comm,
                                         timeout=timeout)
            contribution, op = phases.send(total)
    except StopIteration as done:
        flat[...] = done.value
    return None


class Flight:
    """A bucket's collectives in flight: a transform's generator, driven request by request.
    Its later phases start only in :meth:`GradientBuckets.wait`, bucket by bucket: started as
    earlier ones happened to complete, they would start in different orders on different
    ranks, and pyar's collectives must be called in one order everywhere."""

    __slots__ = ("gen", "request", "result", "done")

    def __init__(self, gen):
        self.gen, self.done, self.result = gen, False, None
        self._next(None, first=True)

    def _next(self, value, first=False):
        try:
            self.request = next(self.gen) if first else self.gen.send(value)
        except StopIteration as stop:
            self.done, self.result, self.request = True, stop.value, None

    def wait(self):
        while not self.done:
            self._next(self.request.wait())
        return self.result


def _like(g, view):
    """``view`` as the kind of array ``g`` is (a torch tensor for a tensor)."""
    if is_torch(g):
        return as_tensor(view)
    return view


def _module(a):
    return np if isinstance(a, np.ndarray) else sys.modules.get("cupy")


def _array(g, i):
    """``g`` as a numpy or cupy array sharing its memory (a torch tensor through pyar.torch)."""
    if isinstance(g, np.ndarray):
        return g
    if is_torch(g):
        return as_array(g)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(g, cupy.ndarray):
        return g
    raise TypeError(f"gradient {i} must be a numpy array, a cupy array or a torch tensor, got "
                    f"{type(g).__name__}")
