"""The ``"pyar"`` torch backend's allreduces: persistent requests kept per call signature.

A group's allreduce of a dense CPU tensor of at most 512 KiB (:func:`fits`) runs on a
:class:`pyar.Persistent` request made for its signature (dtype, element count, op) at the
signature's first call and bound to a buffer of its own (a flat tensor); a call copies its
tensor in (``Tensor.copy_``), starts the request, and the request's completion copies the
result back into the tensor, on whichever thread completes it. A call then costs a start
and wait (about 4 us on one rank) and two copies (about 1 us each) instead of a request's
set-up (a plan's checks, buffers and engine: 50 - 60 us for ``pyar.iallreduce`` of 8 B).

Every rank picks the same request for the same call, as a persistent request needs (its
set-up is collective): a signature keeps up to :data:`SLOTS` requests, made at its first
:data:`SLOTS` nonblocking calls and used in turn by the next (the turn counts the
signature's nonblocking calls, which every rank makes alike), so that many calls of one
signature may be in flight together; blocking calls use its first. A call whose request
is still in flight from an earlier call waits for that call first (complete once every
rank has started it, which they have: they made that call before this one), so two calls
in flight never share a buffer. At most :data:`CACHED` signatures per group; the next new
one empties the cache first (its requests waited for and freed), at the same call on
every rank. The requests hold their buffers (and, on a node, some of the communicator's
shared memory: ``PYAR_SHM_BYTES``) for the group's life.
"""

from __future__ import annotations

import torch

from ..collectives.allreduce import ALLREDUCE
from ..core.buffers import as_array
from ..model.cost import RESIDENT_BYTES
from ..runtime.persistent import Persistent
from ..runtime.progress import Request

__all__ = ["Requests"]

SLOTS = 2           # requests per signature: calls of one signature in flight together
CACHED = 64         # signatures a group keeps requests for


def fits(t) -> bool:
    """Whether an allreduce of the dense CPU tensor ``t`` runs on cached requests: at most
    :data:`~pyar.model.cost.RESIDENT_BYTES` (a Resident's native program, where a call's
    set-up is most of its cost). Larger ones run pyar's own calls, bound to the tensor's
    memory: no copies in and out, and a set-up small against their transfer."""
    return t.is_cpu and t.numel() * t.element_size() <= RESIDENT_BYTES


class _Slot:
    """A cached request, its buffer, and the tensor its start in flight writes."""

    __slots__ = ("request", "buffer", "shaped", "target")

    def __init__(self, t, op, comm, timeout):
        self.buffer = self.shaped = torch.empty(t.numel(), dtype=t.dtype)
        self.target = None
        a = as_array(self.buffer.view(torch.uint8) if t.dtype == torch.bool else self.buffer)
        self.request = Persistent(ALLREDUCE, a, a, op, "auto", comm, 0, timeout,
                                  self._deliver)

    def _deliver(self, result):
        """The request's completion: the result copied into the tensor of its call."""
        t, self.target = self.target, None
        t.copy_(self.shaped)
        return result

    def start(self, t) -> Request | None:
        """Start an allreduce of ``t`` in place: its request, or None if already complete
        (then ``t`` holds the result)."""
        request = self.request
        if request.active:
            request.wait()          # (an earlier call's: it delivers into its own tensor)
        if self.shaped.shape != t.shape:
            self.shaped = self.buffer.view(t.shape)
        self.shaped.copy_(t)
        self.target = t
        request.start()
        return None if request.run is None else Request(request.run)

    def free(self) -> None:
        self.request.free()         # (an active one is waited for first)


class Requests:
    """A group's cached allreduce requests on ``comm`` (a :class:`pyar.Comm`), each call
    waiting at most ``timeout`` seconds (None: for ever)."""

    def __init__(self, comm, timeout):
        self.comm, self.timeout = comm, timeout
        self.kept: dict = {}        # (dtype, count, op) -> [slots, turn]

    def allreduce(self, t, op: str, nonblocking: bool) -> Request | None:
        """Start an allreduce of ``t`` in place (``op``: pyar's name): the request of this
        call, or None if it is complete (``t`` holds the result); complete on return unless
        ``nonblocking``."""
        key = (t.dtype, t.numel(), op)
        entry = self.kept.get(key)
        if entry is None:
            if len(self.kept) >= CACHED:
                self.clear()
            entry = [[], 0]
        slots, turn = entry
        if not nonblocking:
            turn = 0
        else:
            entry[1] = (turn + 1) % SLOTS
        if turn == len(slots):
            slots.append(_Slot(t, op, self.comm, self.timeout))
            self.kept[key] = entry
        slot = slots[turn]
        request = slot.start(t)
        if request is not None and not nonblocking:
            slot.request.wait()
            return None
        return request

    def clear(self) -> None:
        """Free every cached request (those in flight completed first)."""
        kept, self.kept = self.kept, {}
        for slots, _ in kept.values():
            for slot in slots:
                slot.free()
