"""The ``PYAR_*`` environment variables a Comm and the runtime use, read and checked here.

===================== ============================================== =========================
variable              value                                          unset
===================== ============================================== =========================
PYAR_RANKS_PER_NODE   k >= 1: ranks 0..k-1 are node 0, the next k    MPI's shared-memory
                      node 1, ... (emulated nodes)                   domains
PYAR_SHM_BYTES        bytes >= 0 of shared memory per rank for       4 MiB (shm.POOL_BYTES)
                      small plans' mailboxes; 0: none
PYAR_TIMEOUT          seconds > 0 any wait of a collective may       no limit
                      last, then pyar.TimeoutError (a Comm takes
                      it when made; ``timeout=`` overrides it)
PYAR_CUDA_AWARE       0 or 1: whether MPI takes device buffers       the probes decide
                      (read by runtime.cuda, checked here)           (runtime.cuda)
PYAR_CMA              0 or 1: whether large messages between ranks   where the probe allows
                      of a node are read from the sender's memory    (runtime.shm.readable),
                      (cross-memory attach; 1: from any Stream's     for buffers from
                      size)                                          programs.ATTACH_BYTES
PYAR_TRACE_BUFFER     calls >= 0 the flight recorder keeps per       2000
                      communicator (pyar.runtime.recorder); 0: off
PYAR_DEBUG            WARN, INFO or TRACE (pyar.observe.log)                 logging's own config
PYAR_DEBUG_SUBSYS     subsystems, NCCL's syntax (pyar.observe.log)           all
PYAR_REPRODUCIBLE     0 or 1: the default of ``reproducible=`` of        0
                      allreduce and the buckets (pyar.core.exact)
===================== ============================================== =========================

(``PYAR_DEBUG_FILE``, ``PYAR_DUMP_DIR`` are paths, read where used; ``PYAR_TRACE``,
a path too, must be set on every rank or on none.)

(``PYAR_ALGO`` and ``PYAR_TUNING_FILE`` are read by :mod:`pyar.model.tuner` at each call.)

:func:`read` reads them all: a ValueError names each bad variable, what it
takes and what it got. A :class:`pyar.Comm` calls :func:`agree` before its
first collective operation: every rank reads, then one MPI_Allgather of a few
integers turns a bad value on some ranks, or values that differ where the
ranks must agree, into a ValueError on every rank instead of a hang. They
must agree on PYAR_RANKS_PER_NODE (the node layout), on whether
PYAR_SHM_BYTES is 0 (making the mailboxes is collective), on PYAR_ALGO
(else they run different algorithms) and on PYAR_REPRODUCIBLE (else they
run different collectives). What every rank agreed on last is
:func:`current`; the runtime takes its settings from there, so a later
change of the environment on some rank cannot split the ranks.
"""

from __future__ import annotations

import logging
import math
import os
import zlib
from typing import NamedTuple

import numpy as np

TRACE = 5                   # PYAR_DEBUG=TRACE's logging level, below DEBUG: every step
SUBSYSTEMS = ("INIT", "COLL", "TUNE", "SHM", "P2P")     # PYAR_DEBUG_SUBSYS's names
_LEVELS = {"WARN": logging.WARNING, "INFO": logging.INFO, "TRACE": TRACE}


class Settings(NamedTuple):
    """The settings, as read; None where a variable is unset (its default applies)."""

    ranks_per_node: int | None
    shm_bytes: int | None
    timeout: float | None
    cuda_aware: bool | None
    trace_buffer: int | None = None     # (pyar.runtime.recorder)
    debug: int | None = None            # a logging level (pyar.observe.log)
    debug_subsys: frozenset | None = None
    cma: bool | None = None             # (pyar.runtime.shm)
    reproducible: bool | None = None    # (pyar.core.exact)


def _number(kind, least: float, strict: bool, what: str):
    """A parser of ``kind`` values >= ``least`` (> if ``strict``), described as ``what``."""
    def parse(name: str, text: str):
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not (value > least if strict else value >= least):
            raise ValueError(f"{name} must be {what}, got {text!r}")
        return value
    return parse


def _switch(off: str, on: str):
    """A parser of 0 or 1 (False or True), 0 meaning ``off`` and 1 ``on`` in its error."""
    def parse(name: str, text: str) -> bool:
        if text not in ("0", "1"):
            raise ValueError(f"{name} must be 0 ({off}) or 1 ({on}), got {text!r}")
        return text == "1"
    return parse


_cuda_aware = _switch("stage device buffers through host memory", "hand them to MPI")
_cma = _switch("large messages through shared-memory mailboxes",
               "read from the sender's memory where the kernel allows, at any size")
_reproducible = _switch("float sums in the algorithm's order", "reproducible sums: the same "
                        "bits whatever the algorithm and rank count")


def subsystems(text: str) -> set[str]:
    """The subsystems a PYAR_DEBUG_SUBSYS value turns on (ValueError naming a bad one)."""
    text = text.strip()
    exclude = text.startswith("^")
    names = {n.strip().upper() for n in text.lstrip("^").split(",") if n.strip()}
    bad = names - set(SUBSYSTEMS) - {"ALL"}
    if bad:
        raise ValueError(f"PYAR_DEBUG_SUBSYS: unknown subsystem {', '.join(sorted(bad))}; "
                         f"expected a comma list of {', '.join(SUBSYSTEMS)} or ALL, "
                         f"optionally after ^ to exclude them")
    chosen = set(SUBSYSTEMS) if "ALL" in names or not names else names
    return set(SUBSYSTEMS) - chosen if exclude else chosen


def level(text: str) -> int | None:
    """The logging level a PYAR_DEBUG value names (None: unset); ValueError if bad."""
    text = text.strip().upper()
    if not text:
        return None
    if text not in _LEVELS:
        raise ValueError(f"PYAR_DEBUG must be WARN, INFO or TRACE, got {text!r}")
    return _LEVELS[text]


_PARSERS = {
    "PYAR_RANKS_PER_NODE": _number(int, 1, False, "an integer >= 1"),
    "PYAR_SHM_BYTES": _number(int, 0, False, "an integer >= 0 (bytes of shared memory per "
                                             "rank; 0: none)"),
    "PYAR_TIMEOUT": _number(float, 0, True, "a number of seconds > 0 (unset: no timeout)"),
    "PYAR_CUDA_AWARE": _cuda_aware,
    "PYAR_TRACE_BUFFER": _number(int, 0, False, "an integer >= 0 (calls the flight recorder "
                                                "keeps per communicator; 0: none)"),
    "PYAR_DEBUG": lambda name, text: level(text),
    "PYAR_DEBUG_SUBSYS": lambda name, text: frozenset(subsystems(text)),
    "PYAR_CMA": _cma,
    "PYAR_REPRODUCIBLE": _reproducible,
}


def setting(name: str):
    """The variable ``name`` alone, read from the environment now and parsed: its value, or
    None if unset; ValueError if bad."""
    text = os.environ.get(name, "").strip()
    return _PARSERS[name](name, text) if text else None


# what must hold across the ranks, in agree's table from column 1 on
_AGREED = {"PYAR_RANKS_PER_NODE": "the same on every rank",
           "PYAR_SHM_BYTES": "0 on every rank or on none",
           "PYAR_ALGO": "the same on every rank",
           "PYAR_TRACE": "set on every rank or on none",
           "PYAR_REPRODUCIBLE": "the same on every rank"}
_agreed: Settings | None = None


def _read() -> tuple[Settings, dict[str, str]]:
    """The settings (None where bad as well as unset) and ``{variable: error}`` for the bad."""
    values, errors = [], {}
    for name, parse in _PARSERS.items():
        text = os.environ.get(name, "").strip()
        try:
            values.append(parse(name, text) if text else None)
        except ValueError as e:
            values.append(None)
            errors[name] = str(e)
    return Settings(*values), errors


def read() -> Settings:
    """Every setting, read from the environment now; ValueError naming each bad one."""
    found, errors = _read()
    if errors:
        raise ValueError("; ".join(errors.values()))
    return found


def current() -> Settings:
    """The settings every rank agreed on at the last :func:`agree` (before any: :func:`read`)."""
    return read() if _agreed is None else _agreed


def timeout() -> float | None:
    """PYAR_TIMEOUT as agreed: the seconds a wait may last, or None (no limit)."""
    return current().timeout


def ranges(ranks: list[int]) -> str:
    """``0-3, 6`` for the sorted ranks [0, 1, 2, 3, 6]."""
    spans, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            spans.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(spans)


def _ranks(ranks) -> str:
    ranks = [int(r) for r in ranks]
    shown = ", ".join(map(str, ranks[:8])) + (f", ... ({len(ranks)} ranks)" if len(ranks) > 8
                                              else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"


def agree(comm) -> Settings:
    """:func:`read` on every rank of ``comm`` (an mpi4py communicator): collective.

    Raises ValueError on every rank if some rank's settings are bad (there:
    its own error; elsewhere: which ranks have which bad variable) or differ
    where the ranks must agree (see the module docstring).
    """
    global _agreed
    found, errors = _read()
    algo = os.environ.get("PYAR_ALGO", "").strip()
    bad = sum(1 << i for i, name in enumerate(_PARSERS) if name in errors)
    mine = np.array([bad, found.ranks_per_node or 0, found.shm_bytes == 0,
                     zlib.crc32(algo.encode()) + 1 if algo else 0,
                     bool(os.environ.get("PYAR_TRACE", "").strip()),
                     bool(found.reproducible)], np.int64)
    table = np.empty((comm.Get_size(), len(mine)), np.int64)
    comm.Allgather(mine, table)
    if errors:
        raise ValueError("; ".join(errors.values()))
    wrong = []
    for i, name in enumerate(_PARSERS):
        ranks = np.flatnonzero(table[:, 0] >> i & 1)
        if ranks.size:
            wrong.append(f"{_ranks(ranks)} {'has' if ranks.size == 1 else 'have'} a bad {name}")
    if wrong:
        raise ValueError("; ".join(wrong) + " (each such rank's own error says what is wrong)")
    for column, (name, rule) in enumerate(_AGREED.items(), 1):
        odd = np.flatnonzero(table[:, column] != table[0, column])
        if odd.size:
            here = os.environ.get(name, "").strip()
            raise ValueError(f"{name} must be {rule}, but {_ranks(odd)} "
                             f"{'differs' if odd.size == 1 else 'differ'} from rank 0 (here, "
                             f"on rank {comm.Get_rank()}: {repr(here) if here else 'unset'})")
    _agreed = found
    return found
