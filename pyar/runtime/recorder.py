"""The flight recorder: every communicator's last calls, dumped as JSON when something goes wrong.

Each :class:`pyar.Comm` keeps the last ``PYAR_TRACE_BUFFER`` (default
:data:`DEFAULT_CALLS`; 0: off) collective calls in a ring buffer
(:class:`Recorder`): preallocated slots, each a small list that a call's
start overwrites::

    [seq, fingerprint, code, line, began, ended, state, asked]

``fingerprint`` is ``(collective, op, dtype, count, shape, root,
algorithm)``; ``code``/``line`` the caller's code object and the offset of
its calling instruction (the first frame outside pyar's call path; turned
into file:line only when dumped); ``began``/``ended``
``time.perf_counter()`` values (``ended`` None: not complete); ``state`` None
while it runs or once it is done, else what went wrong (the error, and the
step, its number of steps, the peers it waited for and how long: the error's
data, :class:`pyar.PyarError`); ``asked`` the call's algorithm argument.

:func:`dump` writes every live recorder of this process to
``PYAR_DUMP_DIR/rank<R>.json`` (one call a line; ``R`` the rank in
COMM_WORLD; default directory ``./pyar-dump-<time>-<pid of rank 0>``, one per
job): on a timeout, a mismatch or any other pyar error a call raises, on
``SIGUSR1`` (when the handler runs: a rank blocked inside an MPI call runs it
only once the call returns, so give the job a timeout), on
:func:`peer_failed` (a peer's failure announced; once per failed call) and on
``pyar.dump()``. ``pyar doctor DIR`` reads the dumps. Cost per call: a slot's
eight fields written, two clock reads, one walk up the caller's frames; a native
start's row (:class:`Recorder`'s ``ring``) four words and two clock reads in
machine code (``benchmarks/recorder_cost.py`` measures it).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import sys
import time
import weakref
from pathlib import Path

import numpy as np
from mpi4py import MPI

from ..core.errors import PyarError
from . import notice

FORMAT = "pyar-flight/1"
DEFAULT_CALLS = 2000
SEQ, SIG, CODE, LINE, BEGAN, ENDED, STATE, ASKED = range(8)
_INSIDE: set = set()        # the call path's files: a record's caller is the first frame outside


def on_call_path(path: str) -> None:
    """Count the module file ``path`` as part of pyar's call path (:func:`caller` looks past
    its frames): each module on the path says so of itself."""
    _INSIDE.update((str(Path(path)), str(Path(path).resolve())))


on_call_path(__file__)
clock = _clock = time.perf_counter
_getframe = sys._getframe


class Recorder:
    """One communicator's ring of call records: ``slots``, ``n`` records made at once and
    overwritten in turn (no allocation per call); ``next`` the slot the next call takes.
    A slot no call has taken yet has number 0 (no call has).

    A native start (:func:`pyar.kernels.mailbox.start`) writes its record natively into
    ``ring`` instead: an int64 table of ``n`` rows after a header row (the next row, ``n``),
    a row ``(seq, who, began, ended)`` per call in CLOCK_MONOTONIC nanoseconds (ended 0:
    not complete), ``who`` naming what :meth:`register` knows of its request: the call's
    signature, the line that made the request, and its algorithm argument. The records
    are the newest ``n`` of both, by number (:attr:`calls`)."""

    __slots__ = ("slots", "next", "ring", "who", "whom", "comm", "index", "__weakref__")

    def __init__(self, comm, n: int, index: int):
        self.slots = [[0, None, None, 0, 0.0, None, None, None] for _ in range(n)]
        self.next = 0
        self.ring = np.zeros((n + 1, 4), np.int64)
        self.ring[0, 1] = n
        self.who: list = []         # [who]: (signature, code, line, asked)
        self.whom: dict = {}        # (signature, code, line, asked): who
        self.comm = weakref.ref(comm)
        self.index = index          # the how-manieth Comm of this process (alike on its ranks)

    def register(self, sig: tuple, asked: str) -> int:
        """The number that a native start's records of a request with signature ``sig`` and
        algorithm argument ``asked``, made by the caller's caller (outside the call path),
        carry: one per distinct request and line."""
        known = (sig, *caller(), asked)
        who = self.whom.get(known)
        if who is None:
            who = self.whom[known] = len(self.who)
            self.who.append(known)
        return who

    @property
    def calls(self) -> list:
        """The records of the calls kept, oldest first (a call that a native start began and
        Python went on with has its Python record)."""
        calls = {e[SEQ]: e for e in self.slots if e[SEQ]}
        for seq, who, began, ended in self.ring[1:][self.ring[1:, 0] > 0].tolist():
            if seq not in calls:
                sig, code, line, asked = self.who[who]
                calls[seq] = [seq, sig, code, line, began * 1e-9,
                              ended * 1e-9 if ended else None, None, asked]
        return [calls[seq] for seq in sorted(calls)[-len(self.slots):]]


_live: list = []            # weakrefs to every Recorder, in the order their Comms were made
_made = [0]                 # Comms made in this process (numbering them)
_job: dict = {}             # {"dir": default dump directory, "rank": world rank}
_last_dump: list = []       # [path] of the last dump written


def attach(comm, n: int) -> Recorder | None:
    """The recorder of a new :class:`pyar.Comm`, keeping ``n`` calls (PYAR_TRACE_BUFFER, as
    :mod:`pyar.runtime.settings` read it); None if ``n`` is 0. Collective: the process's first
    also agrees on the job's default dump directory."""
    index = _made[0]
    _made[0] += 1
    _start(comm)
    if n == 0:
        return None
    rec = Recorder(comm, n, index)
    _live[:] = [r for r in _live if r() is not None]
    _live.append(weakref.ref(rec))
    return rec


def _start(comm) -> None:
    """On every new Comm (its ranks all make it: the broadcast is collective there, whichever
    Comm is a rank's first), its rank 0's clock and pid; once per process, from the first:
    the job's dump directory name, the world rank, the SIGUSR1 handler (unless one is set)."""
    stamp = np.array([int(time.time()), os.getpid()], np.int64)
    comm.mpi.Bcast(stamp, 0)
    if _job:
        return
    when = time.strftime("%Y%m%d-%H%M%S", time.localtime(int(stamp[0])))
    _job.update(dir=f"pyar-dump-{when}-{int(stamp[1])}", rank=MPI.COMM_WORLD.Get_rank(),
                size=MPI.COMM_WORLD.Get_size())
    notice.listeners.append(_on_notice)
    try:
        if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
            signal.signal(signal.SIGUSR1, lambda signum, frame: dump("SIGUSR1"))
    except (ValueError, AttributeError, OSError):      # not the main thread; no SIGUSR1
        pass


def caller():
    """(code, line) of the first frame outside pyar's call path (api, calls, device)."""
    f = _getframe(1)
    while f.f_back is not None and f.f_code.co_filename in _INSIDE:
        f = f.f_back
    return f.f_code, f.f_lasti


def enter(rec: Recorder | None, seq: int, fingerprint: tuple, asked: str) -> list:
    """Record that call ``seq`` (this one) began (``asked``: its algorithm argument); the
    record (the oldest slot of ``rec``'s ring, overwritten; a new one if ``rec`` is None:
    for the hook's listeners). Its caller is on the call path, so the search for the
    user's frame begins past it."""
    f = _getframe(2)
    while f.f_back is not None and f.f_code.co_filename in _INSIDE:
        f = f.f_back
    if rec is None:
        entry = [0, None, None, 0, 0.0, None, None, None]
    else:
        at = rec.next
        entry = rec.slots[at]
        rec.next = at + 1 if at + 1 < len(rec.slots) else 0
    entry[:] = seq, fingerprint, f.f_code, f.f_lasti, _clock(), None, None, asked
    _current[0] = entry
    return entry


_current = [None]           # the record :func:`enter` made last (a call that fails before
                            # its run exists is marked through it)




def failed(entry: list | None, error: BaseException, why: str = "error") -> None:
    """Record that the call of ``entry`` (None: the last one :func:`enter` made, if it has
    not ended) failed with ``error``, and dump if it is pyar's."""
    if entry is None:
        entry = _current[0]
    if entry is not None and entry[ENDED] is None:
        entry[ENDED] = _clock()
        entry[STATE] = state_of(error)
    if isinstance(error, PyarError) and not getattr(error, "_pyar_dumped", False):
        error._pyar_dumped = True
        try:
            verdict = _verdict(entry)
        except Exception:           # (a verdict must never hide the error itself)
            verdict = ""
        path = dump(type(error).__name__, error)
        told = (f"; {verdict}" if verdict else "") + \
            (f" [flight record: {path}; pyar doctor {path.parent}]" if path else "")
        if told and len(error.args) == 1 and isinstance(error.args[0], str):
            error.args = (error.args[0] + told,)


def _verdict(entry) -> str:
    """The short verdict a failed wait can know by itself: where each rank it waited for is
    stuck (the peers' stall reports, :mod:`pyar.runtime.notice`), or that it is not."""
    state = None if entry is None else entry[STATE]
    if not state or not state.get("peers") or "stopped_by" in state:
        return ""
    comm = next((r().comm() for r in _live if r() is not None
                 and any(e is entry for e in r().slots)), None)
    seen = getattr(getattr(comm, "notice", None), "peers", None)
    if seen is None:
        return ""
    words = []
    for peer in state["peers"]:
        m = seen.get(peer)
        if m is None or m["seq"] < entry[SEQ]:
            since = "" if m is None else f" since call #{m['seq']}"
            words.append(f"rank {peer} has not been stuck in pyar{since} (busy elsewhere, "
                         f"exited or killed?)")
        else:
            last = m["calls"][-1] if m.get("calls") else None
            what = f" ({notice.describe(last[2])})" if last and last[2] else ""
            words.append(f"rank {peer} is waiting in call #{m['seq']}{what} at {m['where']}")
    return "; ".join(words)


def state_of(error: BaseException) -> dict:
    """What went wrong, for a record: the error, and where a wait gave up, from the error's
    data (:class:`pyar.PyarError`): for a call stopped by a peer's failure, where this
    rank's own wait was."""
    state = {"error": type(error).__name__, "message": str(error)}
    by = getattr(error, "failed_rank", None)
    if by is not None:              # a peer's failure, noticed in a wait: what it waited for
        state["stopped_by"] = by
        error = error.waiting
    if isinstance(error, PyarError):
        for key in ("step", "steps", "waited"):
            if getattr(error, key) is not None:
                state[key] = getattr(error, key)
        if error.peers:
            state["peers"] = [int(p) for p in error.peers]
    return state


def peer_failed(rank: int, message: str) -> Path | None:
    """A peer announced a failure (the notice side channel): dump here too."""
    return dump(f"rank {rank} failed", message)


def _on_notice(comm, message: dict) -> None:
    """A notice sent or received (:mod:`pyar.runtime.notice`): a peer's failure dumps here
    at once, whatever this rank is doing (its own raises and dumps again, in its wait); once
    per failed call of a communicator, not once per peer telling of it (after a mismatch
    every rank tells every other: n - 1 dumps of the same record on each rank)."""
    if message.get("kind") == "failed" and comm is not None and message["rank"] != comm.rank:
        if _peer_dumped.get(comm) == message["seq"]:
            return
        _peer_dumped[comm] = message["seq"]
        peer_failed(message["rank"], f"{message['what']}: {message['error']}: "
                                     f"{message.get('text', '')}")


_peer_dumped = weakref.WeakKeyDictionary()  # {Comm: the call a peer's failure of it dumped}


def _record(entry: list, now: float, wall: float) -> dict:
    seq, (collective, op, dtype, count, shape, root, algorithm), code, line, began, ended, \
        state, asked = entry
    out = {"seq": seq, "collective": collective, "op": op, "dtype": dtype, "count": count,
           "shape": list(shape), "root": root, "algorithm": algorithm, "asked": asked,
           "caller": f"{code.co_filename}:{line_of(code, line)}" if code is not None else None,
           "began": wall - (now - began), "seconds": (ended if ended is not None else now) - began,
           "state": "done" if ended is not None and state is None else
                    "failed" if state is not None else "entered"}
    if state is not None:
        out.update(state)
    return out


@functools.lru_cache(maxsize=1024)
def line_of(code, offset: int) -> int | None:
    """The source line of the instruction at byte ``offset`` of ``code`` (a frame's
    ``f_lasti``: what a record keeps, since ``f_lineno`` costs more to read). Remembered: a
    dump asks it for every record, most from one loop, and a long function's table takes
    ~70 us to search."""
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line
    return None


def snapshot(reason: str = "pyar.dump()", error=None) -> dict:
    """What :func:`dump` writes: this process's recorders, as a JSON-able dict."""
    now, wall = _clock(), time.time()
    comms = []
    for ref in _live:
        rec = ref()
        comm = None if rec is None else rec.comm()
        if comm is None:
            continue
        comms.append({"index": rec.index, "rank": comm.rank, "size": comm.size,
                      "seq": comm.seq, "broken": comm.broken,
                      "calls": [_record(e, now, wall) for e in rec.calls]})
    return {"format": FORMAT, "rank": _job.get("rank"), "size": _job.get("size"),
            "host": socket.gethostname(), "pid": os.getpid(), "time": wall, "reason": reason,
            "error": None if error is None else str(error), "comms": comms}


def dump_dir() -> Path:
    """PYAR_DUMP_DIR, else this job's default folder under the current directory."""
    given = os.environ.get("PYAR_DUMP_DIR", "").strip()
    return Path(given or _job.get("dir", f"pyar-dump-{os.getpid()}"))


def dump(reason: str = "pyar.dump()", error=None) -> Path | None:
    """Write this rank's flight record to ``dump_dir()/rank<R>.json``; its path (None if no
    Comm records, or it cannot be written: then a warning on stderr)."""
    if not any(r() is not None for r in _live):
        return None
    data = snapshot(reason, error)
    folder = dump_dir()
    path = folder / f"rank{data['rank']}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(_text(data))
        tmp.replace(path)
    except OSError as e:
        print(f"pyar: cannot write the flight record {path}: {e}", file=sys.stderr)
        return None
    _last_dump[:] = [path]
    return path


def _text(data: dict) -> str:
    """:func:`snapshot`'s ``data`` as JSON text, one call a line: json's C encoder (``indent=``
    takes its Python one: a full recorder's 2,000 calls took 28 ms to encode, now 8 - 12)."""
    comms = []
    for comm in data["comms"]:
        head = json.dumps({k: v for k, v in comm.items() if k != "calls"})[:-1]
        calls = ",\n  ".join(map(json.dumps, comm["calls"]))
        comms.append(f'{head}, "calls": [\n  {calls}]}}')
    head = json.dumps({k: v for k, v in data.items() if k != "comms"})[:-1]
    rows = ",\n ".join(comms)
    return f'{head}, "comms": [\n {rows}]}}\n'


def last_dump() -> Path | None:
    """The path of the last dump this process wrote, if any."""
    return _last_dump[0] if _last_dump else None
