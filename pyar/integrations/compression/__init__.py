"""Gradient compression: transforms around a bucket's average, with error feedback.

A transform turns one rank's float gradient ``g`` (a flat bucket) into the
average over the ranks of what each rank contributes, through pyar's
nonblocking collectives. With **error feedback** (Seide et al. 2014; Stich et
al. 2018; Karimireddy et al. 2019) each rank keeps, per bucket, the residual
``e`` of what it failed to send::

    p = g + e            # the gradient plus what was left out before
    d = C(p)             # what this rank contributes, as the others decode it
    e = p - d            # kept for the next step (exactly, in float32)

so nothing is lost, only delayed. Where ``e`` would not be finite (``p``
beyond float16's range becomes inf; an inf or NaN gradient) it is 0: the
non-finite value reaches that step's average, as it would without feedback
(a loss scaler skips the step), and does not stay in the residual to poison
every later step. The transforms (one module each):

=============  ==========================================  =======================================
spec           scheme (bytes sent per rank, N ranks,        error of one rank's contribution
               n float32 elements, auto's algorithms)
=============  ==========================================  =======================================
``fp16``       cast ``p/N`` to float16, allreduce (sum,     ``|d - p| <= 2**-11 |p|`` (normal
``bf16``       float32 folds), cast back: ~half of float32  range); bf16 ``2**-8 |p|``
``int8``       quantize per chunk of 256 (a float32 scale   ``|d - p| <= max|p_chunk| / 254``, the
               each), alltoall the blocks, each rank sums   averaged block requantized again
               its block in float32 and requantizes it,     (``max|avg_chunk| / 254``)
               allgather: ``2(N-1)/N (n + n/64)``, ~1/4
``topk:R``     the ``k = ceil(R n)`` largest ``|p|``:       ``d`` is ``p`` on those k, 0 elsewhere
               indices and values through allgather:
               ``(N-1) 8k``
=============  ==========================================  =======================================

A transform's :meth:`Transform.reduce` is a generator: it yields each
:class:`pyar.Request` it puts in flight and is sent its result, and returns
the average (so :class:`pyar.GradientBuckets` overlaps every phase with the
caller's work). :func:`get` takes a spec string or a transform; register more
with :func:`register`.
"""

from __future__ import annotations

import numpy as np

from ... import api
from ...algorithms import LIBRARY
from ...collectives import collective as _record
from ...core.schedule import Send
from ...model import tuner
from ...runtime.calls import runs_in
from ...runtime.comm import Comm

__all__ = ["State", "Transform", "get", "register", "sent_bytes", "transforms"]


class State:
    """A bucket's state under a transform: the error-feedback residual (float32, or None)."""

    __slots__ = ("residual",)

    def __init__(self, count: int, error_feedback: bool):
        self.residual = np.zeros(count, np.float32) if error_feedback else None


class Transform:
    """A compression scheme. Subclasses define :meth:`contribution` (what one rank sends, and
    how the others decode it) and :meth:`exchange` (the collectives)."""

    name = "none"
    error_feedback = False
    phases = 1              # collectives one after another (each waits for the one before)

    def state(self, count: int) -> State:
        return State(count, self.error_feedback)

    def reduce(self, g: np.ndarray, state: State, comm: Comm, timeout=None):
        """Generator: yields requests, is sent their results, returns the average of every
        rank's contribution (float32, g's size). With error feedback, updates the residual."""
        p = g.reshape(-1).astype(np.float32, copy=False)
        feedback = state.residual is not None
        if feedback:
            p = p + state.residual
        payload, decoded = self.contribution(p, comm.size, feedback)
        if feedback:
            residual = np.subtract(p, decoded, out=state.residual)
            with np.errstate(over="ignore", invalid="ignore"):  # (a probe: inf - inf is nan)
                finite = np.isfinite(residual.sum())
            if not finite:                          # rare (an overflow: see the docstring):
                residual[~np.isfinite(residual)] = 0    # the masks only then
        return (yield from self.exchange(payload, p.size, comm, timeout))

    def contribution(self, p: np.ndarray, size: int, decode: bool = True):
        """(payload, decoded): what this rank puts in the collectives for ``p`` (which it must
        not modify), and what the ranks make of it (float32, p's size) in the average's sum
        (None unless ``decode``)."""
        raise NotImplementedError

    def exchange(self, payload, count: int, comm: Comm, timeout):
        """Generator: the collectives on ``payload``; returns the average (float32)."""
        raise NotImplementedError

    def wire_bytes(self, count: int, comm: Comm) -> int:
        """Bytes this rank sends for one bucket of ``count`` elements."""
        raise NotImplementedError

    def __repr__(self):
        return self.name


def sent_bytes(collective: str, x_size: int, dtype, comm: Comm) -> int:
    """Bytes this rank sends in ``collective`` of an ``x`` of ``x_size`` elements, counted from
    the schedule of the algorithm ``auto`` picks (the library's: its bus-bandwidth factor)."""
    dtype = np.dtype(dtype)
    record = _record(collective)
    count = record.count(x_size, comm.size)
    name = tuner.select(collective, "auto", comm.size, count, count * dtype.itemsize, dtype,
                        topology=comm.topology)
    dtype = runs_in(name, dtype, record.reduces)   # (the library reduces halves in float32)
    if name == LIBRARY or comm.size == 1:
        return round(record.factor(comm.size) * count * dtype.itemsize) if comm.size > 1 else 0
    steps = api.schedule(name, comm.size, count, collective=collective,
                         topology=comm.topology).steps(comm.rank)
    return sum(op.chunk.count for step in steps for op in step.ops
               if isinstance(op, Send)) * dtype.itemsize


_REGISTRY: dict = {}


def register(name: str, factory) -> None:
    """Make ``get(name)`` / ``get(f"{name}:ARG")`` call ``factory()`` / ``factory(ARG)``."""
    _REGISTRY[name] = factory


def transforms() -> list[str]:
    return sorted(_REGISTRY)


def get(spec) -> Transform | None:
    """The transform of ``spec``: None (no compression), a :class:`Transform`, or a string
    ``"fp16" "bf16" "int8" "topk:RATIO"``; ValueError naming the registered ones otherwise."""
    if spec is None or isinstance(spec, Transform):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"compression must be None, a string or a pyar.compression.Transform, "
                        f"got {type(spec).__name__}")
    name, colon, arg = spec.partition(":")
    factory = _REGISTRY.get(name)
    if factory is None:
        raise ValueError(f"unknown compression {spec!r}; expected one of "
                         f"{', '.join(transforms())} (topk as 'topk:RATIO', e.g. 'topk:0.01')")
    try:
        return factory(arg) if colon else factory()
    except TypeError:
        raise ValueError(f"compression {spec!r}: {name} takes "
                         f"{'no argument' if colon else 'an argument after a colon'}") from None


from . import cast, int8, topk  # noqa: E402,F401  (each registers itself)
