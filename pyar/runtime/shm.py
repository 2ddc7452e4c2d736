"""Shared-memory mailboxes: how a small plan's messages travel between the ranks of one node.

A :class:`pyar.runtime.programs.Resident` sends a message to a rank of its own
node by copying it into a mailbox that the receiver folds (or copies) from
in place, instead of posting an MPI request: no handshake, no eager limit,
and on the development machine an exchange of 8 bytes takes about 1 us
against 2.2 through MPI's own shared-memory queue. The memory is one
shared mapping per communicator and node (:class:`Pool`, :func:`map_node`: a
file in /dev/shm, a segment of it per rank), carved for each plan and element
size into *channels*, one per ordered pair of ranks that the plan connects,
each in the receiver's segment::

    [message 0: two halves | message 1: two halves | ...]
    half: [stamp | bytes], from a cache line on (a half of a page or more:
          from the middle of a page, see Channel.layout)

A half's ``stamp`` is 0 while it is free; the sender copies a message in,
then sets the stamp to the call's mark (``_mark`` in :mod:`pyar.runtime.plan`: the
fingerprint of the call, its collective, op, dtype, count, root and
algorithm, and its sequence number); the receiver waits for a stamp, compares
it with its own call's mark (another: MismatchError, since several calls of
one plan share its channels, and a same-size dtype or another op would
otherwise be folded silently), folds or copies from the half in place, and
clears the stamp. So one word per message carries the handshake and the
check, in the cache line that its first bytes travel in. Message ``k`` of a
call goes to half ``c mod 2`` of slot ``k`` (``c`` the plan's calls so far):
calls alternate halves, so a sender waits only until the receiver has taken
the message two calls back in that half.
A memory fence (:func:`pyar.kernels.mailbox.fence`) orders copies and stamps
where the processor could reorder them (after a copy, before its stamp; after
seeing a stamp, before reading the half; before clearing it), which x86-64
never does: its stores become
visible in program order and its loads pass no earlier load and no later
store, so there the stamps alone suffice (each copy and stamp access is its
own C call, so no compiler reorders them either). A Resident whose messages
all go through mailboxes runs them as one native program
(:mod:`pyar.kernels.mailbox`), which reads stamps with acquire and writes
them with release ordering: the same order, on any processor.

Carving is collective over the node (every rank does it at the same call of
the plan, in :meth:`Pool.channels`); a plan whose channels do not fit in
what is left of some rank's segment sends through MPI (carved space is
given back only with the communicator). A large plan's
:class:`pyar.runtime.programs.Stream` sends its messages in pieces through
mailboxes of a piece each (:meth:`Pool.streams`), shared by every such plan
whose ranks connect alike: only one runs at a time on a communicator. Every
wait goes through :func:`pyar.runtime.progress.wait_for` (bounded by
``PYAR_TIMEOUT`` or a call's ``timeout=``); after a few polls a waiting rank
yields its core, so that an oversubscribed node still moves. A call
interrupted by an error leaves the plan's mailboxes out of step: later calls
of that plan (and of the plans sharing its Stream's mailboxes) raise.
``PYAR_SHM_BYTES`` sets each rank's segment (default :data:`POOL_BYTES`; 0: no
mailboxes, every message through MPI). ``PYAR_RANKS_PER_NODE``'s emulated nodes
share no mailboxes.

Cross-memory attach: where every rank of the node may read the others'
memory with ``process_vm_readv`` (a probe when the pool is made: each rank
reads a word of every other; a kernel without it, a seccomp filter or a
ptrace policy refuses it), the mailbox of a Stream of
:data:`pyar.runtime.programs.ATTACH_BYTES` or more (``PYAR_CMA=1``: of any
size) carries only where a message lies in its sender's memory, and the
receiver reads it from there (:attr:`Pool.attach`; ``PYAR_CMA=0`` turns it
off, and ``pyar info`` says which is in use). The kernel pins each page it
reads, so a sender's buffer of huge pages is read about twice as fast as one
of 4 KiB pages (8 MiB: 0.45 - 0.7 ms against 1.0 - 1.25 on the development
machine); :func:`huge_pages` asks for them where a request keeps its buffers.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import tempfile
import time
import zlib
from itertools import chain
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from ..core.errors import TimeoutError
from ..core.topology import Topology
from ..kernels import mailbox
from . import progress, settings

POOL_BYTES = 4 << 20        # each rank's segment of a communicator's shared mapping
_LINE = 64                  # bytes: every half starts on a cache line
_STAMP = 8                  # bytes: a half's stamp, in its first line with its first bytes
_PAGE = 4096                # bytes: what addresses alias modulo (see Channel.layout)
_OFFSET = _PAGE // 2        # where in a page a half of a page or more starts
_ORDERED = platform.machine().lower() in ("x86_64", "amd64")   # total store order
PATIENCE = 1e-3             # seconds a rank that has a core of its own polls before yielding
_patience = [PATIENCE]      # in force: PATIENCE, or 0 once a pool's node is oversubscribed
_CPUS = 1 << 14              # processor numbers an affinity mask is read up to
_FILES = "/dev/shm" if os.path.isdir("/dev/shm") else None     # (None: the temporary dir)


_HUGE = 2 << 20             # bytes: a huge page (x86-64's and arm64's usual)
_MADV_HUGEPAGE, _MADV_COLLAPSE = 14, 25     # Linux's madvise advice numbers
_madvise: list = []         # libc's madvise, bound at the first use (None: none)


def map_node(node: MPI.Comm, nbytes: int) -> list[np.ndarray]:
    """Shared memory for the ranks of ``node`` (ranks of one node), ``nbytes`` (rounded up to
    whole pages; the ranks' may differ) for each, mapped by every one of them: each rank's
    segment, in node rank order, each starting on a page. One file in /dev/shm (else in the
    temporary directory) that node rank 0 makes, its blocks allocated at once (a full
    /dev/shm is an error here, not a SIGBUS later), and unlinks once every rank has mapped
    it (a job killed in between leaves it behind, ``pyar-*``); the memory goes with the
    last view of it. Collective over ``node``; OSError on every rank where any rank failed.

    Not an MPI shared window: MPICH (5.0.2) allocating or freeing one while another thread
    of the process makes, frees or calls collectives on other communicators corrupts its
    own list of segments, and a later ``MPI_Win_free`` fails an assertion (three threads
    making communicators and windows at 8 ranks: within 200 rounds)."""
    sizes = node.allgather(-(-nbytes // _PAGE) * _PAGE)
    ends = np.cumsum(sizes).tolist()
    rank, name, error, memory = node.Get_rank(), None, "", None
    if rank == 0:
        try:
            fd, name = tempfile.mkstemp(prefix="pyar-", dir=_FILES)
            try:
                os.posix_fallocate(fd, 0, ends[-1])
            finally:
                os.close(fd)
        except OSError as e:
            where = _FILES or tempfile.gettempdir()
            error = f"node rank 0 making {ends[-1]} bytes in {where}: {e}"
    name, error = node.bcast((name, error), root=0)
    if not error:
        try:
            fd = os.open(name, os.O_RDWR)
            try:
                memory = mmap.mmap(fd, ends[-1])
            finally:
                os.close(fd)
        except OSError as e:
            error = f"node rank {rank} mapping {name}: {e}"
    errors = [e for e in node.allgather(error) if e]    # every rank has mapped it, or failed
    if rank == 0 and name is not None:
        os.unlink(name)
    if errors:
        raise OSError(f"shared memory for pyar's mailboxes: {errors[0]}")
    whole = np.frombuffer(memory, np.uint8)
    return [whole[end - size:end] for size, end in zip(sizes, ends)]


class Probe(NamedTuple):
    works: bool
    detail: str             # the error, or what it cost


def probe(comm=None, nbytes: int = 1 << 20) -> Probe:
    """Whether :func:`map_node` of ``nbytes`` a rank works on the node of this rank of
    ``comm`` (COMM_WORLD), and its cost there: mapping, and one round trip of a counter
    between two ranks of the node (as a mailbox's). Collective over ``comm``; the ranks of
    a node get the same answer (the slowest one's costs)."""
    comm = MPI.COMM_WORLD if comm is None else comm
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    error, costs = "", ""
    try:
        start = time.perf_counter()
        segments = map_node(node, nbytes)
        mapped = time.perf_counter() - start
    except OSError as e:
        segments, error = None, str(e)
    ok = np.array([segments is not None], np.int64)
    comm.Allreduce(MPI.IN_PLACE, ok, MPI.MIN)
    if segments is not None:
        trip = _round_trip(segments[0], node) if ok[0] else None
        costs = np.array([mapped, trip or 0.0])
        node.Allreduce(MPI.IN_PLACE, costs, MPI.MAX)     # the node's ranks say the same
        mapped, trip = costs.tolist()
        costs = f"{nbytes >> 20} MiB a rank in {mapped * 1e3:.2f} ms" + (
            f", a round trip through it {trip * 1e6:.2f} us" if trip else "")
    node.Free()
    if not ok[0]:
        return Probe(False, error or "failed on another rank of the job")
    return Probe(True, costs)


def _round_trip(segment: np.ndarray, node, budget: float = 0.05) -> float | None:
    """Seconds of one round trip of a counter between node ranks 0 and 1 through
    ``segment``, memory they share (on rank 0; None elsewhere and on a node of one rank):
    each side polls, as a mailbox's receiver does. At most 2,000 trips, and about
    ``budget`` seconds: on an oversubscribed node the two ranks share cores with the
    others, which poll in the barrier, and a trip can take a time slice (2,000 took 35 s
    at 8 ranks on 2 cores)."""
    rank, most = node.Get_rank(), 2000
    ping, pong = (memoryview(segment[at:at + 8]).cast("q") for at in (0, 64))
    if rank == 0:
        ping[0] = pong[0] = 0
    node.Barrier()
    start = time.perf_counter()
    trips = 1
    if node.Get_size() > 1 and rank == 0:
        end, trips = start + budget, 0
        while trips < most and (trips % 8 or time.perf_counter() < end):
            trips += 1
            ping[0] = trips
            while pong[0] < trips:
                pass
        ping[0] = -1                # done
    elif node.Get_size() > 1 and rank == 1:
        seen = 0
        while True:
            while ping[0] == seen:
                pass
            seen = ping[0]
            if seen < 0:
                break
            pong[0] = seen
    seconds = (time.perf_counter() - start) / trips
    node.Barrier()
    return seconds if rank == 0 and node.Get_size() > 1 else None


def huge_pages(a: np.ndarray) -> None:
    """Ask the kernel to back the whole huge pages within ``a`` with huge pages: MADV_HUGEPAGE,
    then MADV_COLLAPSE (Linux 6.1 and later), which moves the bytes there at once, at about
    3 GB/s on the development machine. Advice only: where refused or not known, nothing
    changes; ``a``'s contents are kept either way. Costs a few ms a 16 MiB buffer of 4 KiB
    pages, little for one already of huge pages."""
    if not _madvise:
        try:
            call = ctypes.CDLL(None, use_errno=True).madvise
            call.argtypes, call.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], \
                ctypes.c_int
        except AttributeError:     # no such call in this C library
            call = None
        _madvise.append(call)
    lo = -(-a.ctypes.data // _HUGE) * _HUGE
    hi = (a.ctypes.data + a.nbytes) // _HUGE * _HUGE
    if _madvise[0] is not None and hi > lo:
        for advice in (_MADV_HUGEPAGE, _MADV_COLLAPSE):
            _madvise[0](lo, hi - lo, advice)


_sync = None if _ORDERED else mailbox.fence     # a Channels' memory barrier, where one is needed


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _LINE) * _LINE


def _digest(sizes: list[int]) -> int:
    """A fingerprint of a channel's message sizes (both ends compute it, and compare)."""
    return zlib.crc32(np.array(sizes, np.int64).tobytes()) + 1     # never 0: no channel


def _word(segment: np.ndarray, offset: int) -> memoryview:
    """The int64 at ``offset`` of ``segment``, as a memoryview (cheaper to poll than numpy)."""
    return memoryview(segment[offset:offset + 8]).cast("q")


def patience() -> float:
    """Seconds a waiting rank polls before it starts to yield its core: :data:`PATIENCE`,
    or 0 once a pool's node has turned out oversubscribed."""
    return _patience[0]


class _Vector(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def readable(node: MPI.Comm) -> int:
    """Whether the ranks of ``node`` (one node's) read each other's memory with
    ``process_vm_readv``, as they all agree (collective over ``node``): 0 if any rank's read
    of a word of another failed, or any has PYAR_CMA=0; else 2 if every rank has PYAR_CMA=1
    (every Stream), 1 if not (Streams of :data:`pyar.runtime.programs.ATTACH_BYTES` or
    more)."""
    word = np.array([os.getpid(), 0], np.int64)
    word[1] = word.ctypes.data
    table = np.empty((node.Get_size(), 2), np.int64)
    bounded(node.Iallgather(word, table), (word, table))
    got = np.zeros(1, np.int64)
    try:
        readv = ctypes.CDLL(None, use_errno=True).process_vm_readv
        readv.restype = ctypes.c_ssize_t
        readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                          ctypes.c_ulong, ctypes.c_ulong]
        ok = all(readv(int(pid), ctypes.byref(_Vector(got.ctypes.data, 8)), 1,
                       ctypes.byref(_Vector(int(at), 8)), 1, 0) == 8 and got[0] == pid
                 for pid, at in table)
    except (AttributeError, OSError):       # no such call in this C library
        ok = False
    cma = settings.current().cma
    agreed = np.array([0 if not ok or cma is False else 2 if cma else 1], np.int64)
    bounded(node.Iallreduce(MPI.IN_PLACE, agreed, MPI.MIN), agreed)
    return int(agreed[0])


def cores_of(node: MPI.Comm) -> int:
    """How many processors the ranks of ``node`` (one node's) may run on together: the
    union of their affinity masks (collective over ``node``)."""
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else \
        range(os.cpu_count() or 1)
    union = np.zeros(_CPUS, np.uint8)
    union[[cpu for cpu in mine if cpu < _CPUS]] = 1
    node.Allreduce(MPI.IN_PLACE, union, MPI.MAX)
    return int(union.sum())


class Channel:
    """One ordered pair's mailboxes in one plan: ``m`` messages a call, two halves each.

    ``slots[k]`` are message k's two halves (uint8 arrays), ``stamps[k]`` their
    stamps (a word each, in the half's first cache line, before its bytes), and
    ``addresses[k]`` where the stamps and the halves' bytes are: (stamp0, stamp1,
    bytes0, bytes1), for a native program (:mod:`pyar.kernels.mailbox`).
    """

    __slots__ = ("peer", "slots", "stamps", "addresses")

    def __init__(self, peer: int, segment: np.ndarray, base: int, sizes: list[int]):
        self.peer, self.slots, self.stamps, self.addresses = peer, [], [], []
        origin = segment.ctypes.data
        starts, _ = Channel.layout(origin, base, sizes)
        for n, (first, second) in zip(sizes, starts):
            self.stamps.append((_word(segment, first), _word(segment, second)))
            self.addresses.append((origin + first, origin + second,
                                   origin + first + _STAMP, origin + second + _STAMP))
            self.slots.append((segment[first + _STAMP:first + _STAMP + n],
                               segment[second + _STAMP:second + _STAMP + n]))

    def halves(self, k: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """Message k's two halves, as arrays of ``dtype``."""
        return tuple(half.view(dtype) for half in self.slots[k])

    @staticmethod
    def layout(origin: int, at: int, sizes: list[int]) -> tuple[list[tuple[int, int]], int]:
        """Where the two halves of each message of ``sizes`` bytes start (their stamps), in a
        segment at address ``origin`` from byte ``at`` on, and where the channel ends.

        A half starts on a cache line; one of a page or more starts half a page into a page
        (:data:`_OFFSET`), so that its bytes lie about 2 KiB away, in their address's low 12
        bits, from those of a page-aligned buffer (as numpy's, torch's and MPI's large ones
        are, give or take a few bytes). A copy or fold between addresses a few hundred bytes
        apart in those bits runs up to 3x slower on x86-64 (4K aliasing: a load whose low
        12 bits match a store still in flight waits for it), and the offsets a carving
        would otherwise meet depend on what was carved before it.
        """
        starts = []
        for n in sizes:
            pair = []
            for _ in range(2):
                if n >= _PAGE:
                    at += (_OFFSET - origin - at) % _PAGE
                pair.append(at)
                at += _aligned(_STAMP + n)
            starts.append(tuple(pair))
        return starts, at


class Channels:
    """A plan's channels for one element size: ``out[peer]``, ``into[peer]`` (comm ranks), the
    calls run so far (None once unusable), and the memory barrier ``sync``
    (:func:`pyar.kernels.mailbox.fence`; None on x86-64, which needs none); ``span``: where
    its ``into`` mailboxes lie in this rank's segment (``(start, end)`` bytes); ``attach``:
    a Stream's, its pool's :attr:`Pool.attach`. The count of calls is the int64 word
    ``counter`` (-1: unusable), which a native start reads and advances itself."""

    def __init__(self, out: dict, into: dict, sync, span=(0, 0)):
        self.out, self.into, self.sync = out, into, sync
        self.counter = np.zeros(1, np.int64)
        self.span, self.released, self.attach = span, False, 0

    @property
    def calls(self) -> int | None:
        n = self.counter.item(0)
        return None if n < 0 else n

    @calls.setter
    def calls(self, n: int | None) -> None:
        self.counter[0] = -1 if n is None else n


class Pool:
    """This rank's segment of a shared mapping over the ranks of ``comm`` on its node.

    Made collectively (by :func:`pool_of`); freed collectively by :meth:`free`. It also
    finds out whether the node has a processor for each of the communicator's ranks on it
    (``cores``, ``oversubscribed``); once a pool has found its node oversubscribed, every
    native program polls a stamp once before Python waits, and every stalled wait naps
    (:data:`.progress.napping`). ``attach``: whether its Streams read messages straight
    from their senders' memory (:func:`readable`: 0 never, 1 large ones, 2 all).
    """

    def __init__(self, comm: MPI.Comm, nbytes: int):
        rank, size = comm.Get_rank(), comm.Get_size()
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        self.cores = cores_of(shared)
        self.oversubscribed = shared.Get_size() > self.cores
        if self.oversubscribed:             # polling then takes a core a peer needs
            _patience[0] = 0.0
            progress.napping = True
        per_node = settings.current().ranks_per_node
        emulated = Topology.regular(size, per_node).node_of[rank] if per_node else 0
        self.node = shared.Split(emulated, rank)
        shared.Free()
        self.attach = readable(self.node)
        group, local = comm.Get_group(), self.node.Get_group()
        ranks = MPI.Group.Translate_ranks(group, list(range(size)), local)
        group.Free()
        local.Free()
        self.local = {r: n for r, n in enumerate(ranks) if n != MPI.UNDEFINED}
        self.segments = map_node(self.node, nbytes)     # each from a page on
        mine = self.segments[self.node.Get_rank()]
        self.used = -mine.ctypes.data % _LINE   # stamps never straddle a cache line
        self.carved: list[Channels] = []
        self.streamed: dict = {}        # the ranks' pairs -> their Streams' Channels (or None)

    def channels(self, spans, itemsize: int) -> Channels | None:
        """Carve mailboxes for the messages of ``spans`` (a plan's (where, sends, recvs) per
        step) that stay on this node; None if some rank's segment has no room (then all
        ranks send through MPI). Collective over the node."""
        out, into = {}, {}
        for _, sends, recvs in spans:
            for boxes, wires in ((out, sends), (into, [r.wire for r in recvs])):
                for w in wires:
                    if w.peer in self.local:
                        boxes.setdefault(w.peer, []).append((w.hi - w.lo) * itemsize)
        return self._carve(out, into)

    def streams(self, spans, piece: int, streamable: bool = True,
                shared: bool = True) -> Channels | None:
        """The mailboxes of a :class:`pyar.runtime.programs.Stream`, whose messages go in pieces
        of at most ``piece`` bytes: between two ranks, a mailbox for each message of a step
        (the most of any step). A blocking call runs alone on its communicator, so every
        plan whose ranks all connect alike shares them (``shared``; else they are carved
        anew: a persistent request's own). None unless every message of every rank of the
        node has one (and every rank's plan is ``streamable``). Collective over the node
        (an allgather of each rank's pairs; the first such plan carves)."""
        out, into, remote = {}, {}, False
        for _, sends, recvs in spans:
            for boxes, wires in ((out, sends), (into, [r.wire for r in recvs])):
                step: dict = {}
                for w in wires:
                    remote |= w.peer not in self.local
                    step[w.peer] = step.get(w.peer, 0) + 1
                for peer, n in step.items():
                    boxes[peer] = max(boxes.get(peer, 0), n)
        pairs = [piece, *chain(*sorted(out.items())), -1, *chain(*sorted(into.items()))]
        mine = np.array([0 if remote or not streamable else _digest(pairs)], np.int64)
        keys = np.empty(len(self.segments), np.int64)
        bounded(self.node.Iallgather(mine, keys), (mine, keys))
        if not keys.all():
            return None
        key = keys.tobytes()
        if not shared or key not in self.streamed:
            carved = self._carve({p: [piece] * n for p, n in out.items()},
                                 {p: [piece] * n for p, n in into.items()}, True)
            if carved is not None:
                carved.attach = self.attach
            if not shared:
                return carved
            self.streamed[key] = carved
        return self.streamed[key]

    def _carve(self, out: dict, into: dict, whole: bool = False) -> Channels | None:
        """Channels for the mailboxes of ``out`` and ``into`` (per peer, their sizes in bytes);
        with ``whole``, None unless every pair of the node agrees (else such a pair's
        messages go through MPI). Collective over the node."""
        mine = self.segments[self.node.Get_rank()]
        mine_at = self.used
        table = np.zeros((len(self.segments), 3), np.int64)    # per node rank: its row
        for peer in sorted(into):
            row = table[self.local[peer]]
            row[:] = mine_at, _digest(into[peer]), 0
            _, mine_at = Channel.layout(mine.ctypes.data, mine_at, into[peer])
        for peer, sizes in out.items():
            table[self.local[peer], 2] = _digest(sizes)
        fits = np.array([mine_at <= len(mine)], np.int64)
        bounded(self.node.Iallreduce(MPI.IN_PLACE, fits, MPI.MIN), fits)
        if not fits[0]:
            return None
        mine[self.used:mine_at] = 0
        start, self.used = self.used, mine_at
        theirs = np.empty_like(table)
        # tell each peer where my channel to them starts, what they expect from me and what
        # they send me; fenced on both sides where the processor reorders (the zeroed
        # mailboxes seen before the peers hear of them, theirs after)
        if _sync is not None:
            _sync()
        bounded(self.node.Ialltoall(table, theirs), (table, theirs))
        if _sync is not None:
            _sync()
        # a pair whose ranks disagree on its messages (the ranks' plans differ) goes through
        # MPI: a message of another size is reported by its receiver
        wanted = len(out) + len(into)
        out = {p: Channel(p, self.segments[self.local[p]], int(theirs[self.local[p], 0]), sizes)
               for p, sizes in out.items() if theirs[self.local[p], 1] == _digest(sizes)}
        into = {p: Channel(p, mine, int(table[self.local[p], 0]), sizes)
                for p, sizes in into.items() if theirs[self.local[p], 2] == _digest(sizes)}
        if whole:
            agreed = np.array([len(out) + len(into) == wanted], np.int64)
            bounded(self.node.Iallreduce(MPI.IN_PLACE, agreed, MPI.MIN), agreed)
            if not agreed[0]:
                self.used = start
                return None
        carved = Channels(out, into, _sync, (start, mine_at))
        self.carved.append(carved)
        return carved

    def release(self, channels: Channels) -> None:
        """``channels`` (carved for a persistent request, now freed) are used no more: runs on
        them raise from now on, and their room in this rank's segment goes back to later
        carvings once every channel carved after them is released too (the segment is a
        stack). Local, as MPI_Request_free is: a peer writes into that room again only for
        a request every rank made after this one (a carving is collective)."""
        channels.calls, channels.released = None, True
        while self.carved and self.carved[-1].released:
            self.used = self.carved.pop().span[0]

    def free(self) -> None:
        """Let go of the shared memory (unmapped once no array views it any more) and free
        the node communicator (collective over the node); Residents on its channels raise
        from now on."""
        for carved in self.carved:
            carved.calls = None
        self.segments, self.carved, self.streamed = [], [], {}
        if not MPI.Is_finalized():
            self.node.Free()


def bounded(request, buffers) -> None:
    """Wait for a set-up's collective ``request`` (a carving's, or a persistent request's
    choice of engine) until PYAR_TIMEOUT (as agreed) at most: a rank whose plan needs
    mailboxes the others' do not (another element size) must not wait for ever."""
    timeout = settings.current().timeout
    try:
        progress.wait_for(request.Test, progress.deadline_of(timeout), lambda waited:
                          TimeoutError(f"setting up shared-memory mailboxes (a plan's first "
                                       f"blocking call with this element size) waited "
                                       f"{waited:.1f} s for the other ranks of the node"))
    except BaseException:
        progress.ABANDONED.append((request, buffers))   # still posted: MPI may write there
        raise


def _free_pool(comm, keyval, pool) -> None:
    if pool:            # (False: the communicator has no mailboxes)
        pool.free()


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_free_pool)     # a communicator's Pool


def pool_of(comm: MPI.Comm) -> Pool | None:
    """The :class:`Pool` of ``comm``, made on the first call (collective) and freed with
    ``comm``; None if PYAR_SHM_BYTES is 0 (as every rank agreed on it:
    :func:`pyar.runtime.settings.current`)."""
    found = comm.Get_attr(_KEYVAL)
    if found is None:
        agreed = settings.current().shm_bytes
        nbytes = POOL_BYTES if agreed is None else agreed
        found = Pool(comm, nbytes) if nbytes else False
        comm.Set_attr(_KEYVAL, found)
    return found or None
