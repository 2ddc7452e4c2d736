"""Choosing the algorithm: an explicit name, else ``PYAR_ALGO``, else the ``auto`` rule.

``PYAR_ALGO`` works like NCCL_ALGO: one name for every collective
(``PYAR_ALGO=ring``) or per collective (``allreduce:ring;allgather:bruck``).
Until a tuning file exists, ``auto`` follows MPICH's rules of thumb (its
CVAR defaults): latency-bound tree/doubling algorithms for short messages,
bandwidth-optimal ones above.
"""

from __future__ import annotations

import functools
import os

from .algorithms import AUTO, check_name

SHORT_MSG_BYTES = 2048      # MPICH's MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE (and REDUCE_)


@functools.lru_cache(maxsize=16)
def _parse_override(text: str) -> dict:
    """``{collective or None: name}`` from a PYAR_ALGO value."""
    table = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        collective, sep, name = item.rpartition(":")
        table[collective.strip() if sep else None] = name.strip()
    return table


def override(collective: str) -> str | None:
    """The algorithm PYAR_ALGO names for ``collective``, if any."""
    text = os.environ.get("PYAR_ALGO")
    if not text:
        return None
    table = _parse_override(text)
    return table.get(collective, table.get(None))


def select(collective: str, algorithm: str, size: int, count: int, nbytes: int) -> str:
    """The algorithm to run: ``algorithm`` unless it is ``auto``; ValueError if unknown."""
    if algorithm != AUTO:
        return check_name(algorithm, collective)
    forced = override(collective)
    if forced and forced != AUTO:
        try:
            return check_name(forced, collective)
        except ValueError as e:
            raise ValueError(f"PYAR_ALGO: {e}") from None
    return _RULES[collective](size, count, nbytes)


def _is_pof2(size):
    return size & (size - 1) == 0


def _allreduce(size, count, nbytes):
    pof2 = 1 << (size.bit_length() - 1)
    if size == 1 or nbytes <= SHORT_MSG_BYTES or count < pof2:
        return "recursive_doubling"
    return "rabenseifner"


def _reduce_scatter(size, count, nbytes):      # REDSCAT_COMMUTATIVE_LONG_MSG_SIZE
    return "recursive_halving" if nbytes < 524288 else "pairwise"


def _allgather(size, count, nbytes):           # ALLGATHER_SHORT_/LONG_MSG_SIZE, on the total
    if nbytes < 81920:
        return "recursive_doubling" if _is_pof2(size) else "bruck"
    return "recursive_doubling" if nbytes < 524288 and _is_pof2(size) else "ring"


def _reduce(size, count, nbytes):
    pof2 = 1 << (size.bit_length() - 1)
    return "binomial" if nbytes <= SHORT_MSG_BYTES or count < pof2 else "reduce_scatter_gather"


def _bcast(size, count, nbytes):               # BCAST_SHORT_MSG_SIZE, BCAST_MIN_PROCS
    return "binomial" if nbytes < 12288 or size < 8 else "scatter_allgather"


def _alltoall(size, count, nbytes):            # ALLTOALL_MEDIUM_MSG_SIZE, per block
    return "linear" if nbytes // max(size, 1) < 32768 else "pairwise"


_RULES = {"allreduce": _allreduce, "reduce_scatter": _reduce_scatter, "allgather": _allgather,
          "reduce": _reduce, "bcast": _bcast, "alltoall": _alltoall,
          "barrier": lambda size, count, nbytes: "dissemination"}
