"""Logs: the ``pyar`` logger, its subsystems, and NCCL_DEBUG's environment variables.

Everything goes through Python's :mod:`logging`: the logger ``pyar`` and one
child per subsystem (``pyar.INIT`` ...), so an application can route it. The
environment configures it with no code:

================== ====================================================== ==============
variable           value                                                  unset
================== ====================================================== ==============
PYAR_DEBUG         ``WARN``, ``INFO`` or ``TRACE`` (INFO and every step)   the logging
                                                                          config's own
PYAR_DEBUG_SUBSYS  comma list of :data:`SUBSYSTEMS` (or ALL); a leading    ALL
                   ``^`` excludes those listed (NCCL_DEBUG_SUBSYS's syntax)
PYAR_DEBUG_FILE    file to write instead of stderr; ``%h`` host, ``%p``    stderr
                   pid, ``%r`` rank in COMM_WORLD
================== ====================================================== ==============

At INFO: once per communicator what was set up (INIT: ranks, nodes,
mailboxes, CUDA-awareness, tuning file), one line per collective call
(COLL: sequence number, collective, count, dtype, op, root, the algorithm
and why, and its time), each new ``auto`` choice with the cost model's
top predictions (TUNE). TRACE adds every step (P2P: peers, bytes, how long
it waited). Whether calls are logged is decided when a Comm is made (the
level of ``pyar.COLL``/``pyar.P2P`` then): logged calls take the runtime's
instrumented path (its event hook, :data:`pyar.runtime.progress.hook`);
otherwise nothing on the fast path looks at logging at all.
"""

from __future__ import annotations

import logging
import os
import socket

from mpi4py import MPI

from ..collectives import collective as record_of
from ..model import tuner
from ..runtime import cuda, progress, recorder
from ..runtime.comm import Comm
from ..runtime.settings import SUBSYSTEMS, TRACE, level, subsystems  # noqa: F401  (parsers)

logging.addLevelName(TRACE, "TRACE")
root = logging.getLogger("pyar")
loggers = {name: root.getChild(name) for name in SUBSYSTEMS}
_configured: dict = {}      # {"handler": the handler PYAR_DEBUG installed}
_listening = [False]


def file_name(pattern: str, rank: int) -> str:
    """PYAR_DEBUG_FILE with ``%h`` (host), ``%p`` (pid) and ``%r`` (rank) filled in."""
    return (pattern.replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
            .replace("%r", str(rank)))


def configure(rank: int, chosen: int | None, on) -> None:
    """Apply PYAR_DEBUG's level ``chosen``, PYAR_DEBUG_SUBSYS's subsystems ``on`` (None: all)
    and PYAR_DEBUG_FILE (once per process; ``rank`` for ``%r``). Unset PYAR_DEBUG leaves
    the logging configuration as the application set it."""
    if "done" in _configured:
        return
    on = set(SUBSYSTEMS) if on is None else on
    _configured["done"] = True
    if chosen is None:
        return
    pattern = os.environ.get("PYAR_DEBUG_FILE", "").strip()
    handler = (logging.FileHandler(file_name(pattern, rank)) if pattern
               else logging.StreamHandler())
    handler.setFormatter(logging.Formatter(
        f"{socket.gethostname()}:{os.getpid()}:{rank} [pyar %(subsystem)s] %(message)s"))
    handler.addFilter(_subsystem)
    root.addHandler(handler)
    root.setLevel(chosen)
    root.propagate = False          # PYAR_DEBUG says where it goes: not twice
    for name, logger in loggers.items():
        logger.setLevel(chosen if name in on else logging.CRITICAL + 1)
    _configured["handler"] = handler


def _subsystem(record: logging.LogRecord) -> bool:
    record.subsystem = record.name.rpartition(".")[2] if "." in record.name else "-"
    return True


def comm_made(c) -> None:
    """A Comm was made: log what was set up (INIT), and if its calls are to be logged, put
    the logging listener on the runtime's event hook."""
    configure(_world_rank(c), c.settings.debug, c.settings.debug_subsys)
    init = loggers["INIT"]
    if init.isEnabledFor(logging.INFO):
        s = c.settings
        nodes = len(c.topology.nodes)
        shm = ("none (PYAR_SHM_BYTES=0)" if s.shm_bytes == 0 else
               f"{s.shm_bytes if s.shm_bytes is not None else 4 << 20} B per rank, made at the "
               f"first blocking call of a plan")
        aware = cuda.awareness()
        init.info(f"comm {c.mpi.Get_name()!r}: rank {c.rank} of {c.size}, {nodes} node"
                  f"{'s' if nodes != 1 else ''}; shared-memory mailboxes: {shm}; CUDA-aware "
                  f"MPI: {'yes' if aware.aware else 'no'} ({aware.reason}); tuning: "
                  f"{tuner.source()}; timeout: {s.timeout or 'none'}; flight recorder: "
                  f"{0 if c.recorder is None else len(c.recorder.slots)} calls")
    if not _listening[0] and (loggers["COLL"].isEnabledFor(logging.INFO)
                              or loggers["P2P"].isEnabledFor(TRACE)):
        _listening[0] = True
        progress.listen(_on_event)


def _world_rank(c) -> int:
    return MPI.COMM_WORLD.Get_rank()


def peers_and_bytes(step, ctx) -> tuple[list[int], int, int]:
    """A step's peers, bytes sent and bytes received (as far as its kind says)."""
    peers, sent, received = set(), 0, 0
    sends, recvs = getattr(step, "sends", None), getattr(step, "recvs", None)
    if sends is not None:           # the general path: spans of elements
        size = ctx.bufs[0].dtype.itemsize if getattr(ctx, "bufs", None) else 1
        for s in sends:
            peers.add(s.peer)
            sent += (s.hi - s.lo) * size
        for r in recvs:
            peers.add(r.wire.peer)
            received += (r.wire.hi - r.wire.lo) * size
    elif hasattr(step, "puts"):     # a Resident's: mailboxes (peer, ..., nbytes), requests
        peers.update(entry[0] for entry in (*step.puts, *step.boxes))
        sent += sum(put[-1] for put in step.puts)
        received += sum(box[-1] for box in step.boxes)
        peers.update(step.peers)
        received += sum(check[1] for check in step.checks)
    elif hasattr(step, "traffic"):  # a native program's rows
        return step.traffic()
    return sorted(peers), sent, received


_posted: dict = {}          # id(run) -> when its current step was posted


def _on_event(event, run, index) -> None:
    if event == "post":
        _posted[id(run)] = recorder.clock()
    elif event == "complete":
        p2p = loggers["P2P"]
        if p2p.isEnabledFor(TRACE):
            now = recorder.clock()
            peers, sent, received = peers_and_bytes(run.steps[index], run.ctx)
            p2p.log(TRACE, f"{run.what}: step {index} of {len(run.steps)}: peers {peers}, "
                           f"sent {sent} B, received {received} B, "
                           f"{(now - _posted.get(id(run), now)) * 1e6:.1f} us from posting "
                           f"to done")
    elif event == "done":
        _posted.pop(id(run), None)
        coll = loggers["COLL"]
        if coll.isEnabledFor(logging.INFO):
            coll.info(describe(run))


def describe(run) -> str:
    """A call's INFO line: what it was, which algorithm and why, how long it took."""
    if run.record is None or run.record[0] is None:
        return f"{run.what}: {'failed' if run.error is not None else 'done'}"
    entry, comm = run.record
    seconds = recorder.clock() - entry[recorder.BEGAN]
    seq, (collective, op, dtype, count, shape, root, name), *_ = entry
    asked = entry[recorder.ASKED]
    why = tuner.reason(collective, asked, comm.size, count_of(collective, count, comm.size),
                       dtype, comm.topology)
    outcome = "failed" if run.error is not None else "done"
    return (f"{collective} #{seq}: count {count} {dtype}"
            f"{'' if op is None else ' op ' + op}{f' root {root}' if root else ''}: {name} "
            f"({why}); {outcome} in {seconds * 1e6:.1f} us")


def count_of(collective: str, size_of_x: int, nranks: int) -> int:
    return record_of(collective).count(size_of_x, nranks)


Comm.on_made.append(comm_made)
