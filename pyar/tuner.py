"""Choosing the algorithm: an explicit name, else ``PYAR_ALGO``, else the ``auto`` rule.

``PYAR_ALGO`` works like NCCL_ALGO: one name for every collective
(``PYAR_ALGO=ring``) or per collective (``allreduce:ring;allgather:bruck``).
Until a tuning file exists, ``auto`` follows MPICH's rule of thumb for
allreduce: recursive doubling up to 2 KiB or when there are fewer elements
than ranks, Rabenseifner above.
"""

from __future__ import annotations

import functools
import os

from .algorithms import AUTO, check_name

SHORT_MSG_BYTES = 2048      # MPICH's MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE


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
    if size == 1:
        return "recursive_doubling"
    pof2 = 1 << (size.bit_length() - 1)
    if nbytes <= SHORT_MSG_BYTES or count < pof2:
        return "recursive_doubling"
    return "rabenseifner"
