"""Swing's peers and block layout (De Sensi et al., NSDI 2024), shared by its two variants.

In step ``s`` of ``L = log2 P`` steps (``P`` a power of two), rank r talks to
``r + rho(s)`` if r is even and ``r - rho(s)`` if odd (mod P), with
``rho(s) = 1, -1, 3, -5, 11, ...`` (the sum of ``(-2)^i`` for ``i <= s``): the
distances ``1, 1, 3, 5, 11, 21, ...`` stay below recursive doubling's ``2^s``,
which on a 1-D torus (a ring of links) is what Swing saves.

The groups of a butterfly on these peers: ``group(r, L) = {r}`` and
``group(r, s) = group(r, s+1) | group(peer(r, s), s+1)``. For a power of two
the groups of one level partition the ranks and each splits in two at the next
(:func:`layout` checks it), so laying the blocks out in the order of that tree
makes every group a contiguous range of blocks: in step s rank r keeps the
range of its own next group and hands its peer the other half. Rank r's own
block is at position ``layout(P).key[r]``, not r.

Other rank counts ``N = P + E``, as the authors' reference library does:
ranks ``P..N-1`` hand their data to the rank ``E`` below them, which folds it
in and stands for both; afterwards it hands the result back (2 steps more).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ..core.schedule import Recv, Send


def rho(s: int) -> int:
    return (1 - (-2) ** (s + 1)) // 3


def peer(rank: int, s: int, pof2: int) -> int:
    """Swing's peer of ``rank`` in step ``s`` among ``pof2`` ranks."""
    return (rank + rho(s)) % pof2 if rank % 2 == 0 else (rank - rho(s)) % pof2


def peers(s: int, pof2: int) -> np.ndarray:
    """Every rank's peer in step ``s`` (vectorized :func:`peer`)."""
    r = np.arange(pof2)
    return np.where(r % 2 == 0, r + rho(s), r - rho(s)) % pof2


class Layout(NamedTuple):
    steps: int              # log2 P
    key: np.ndarray         # rank -> the position of its block; the top bits name its groups


@functools.lru_cache(maxsize=32)
def layout(pof2: int) -> Layout:
    """The block position of every rank such that every butterfly group is a range."""
    steps = pof2.bit_length() - 1
    label = np.arange(pof2)                 # a group's label: its least rank
    key = np.zeros(pof2, np.int64)
    for s in range(steps - 1, -1, -1):
        other = label[peers(s, pof2)]
        if (other == label).any():
            raise AssertionError(f"swing groups overlap at step {s} of {pof2} ranks")
        key |= (label > other).astype(np.int64) << (steps - 1 - s)
        label = np.minimum(label, other)
    if len(set(key.tolist())) != pof2:
        raise AssertionError(f"swing groups of {pof2} ranks are not a butterfly")
    return Layout(steps, key)


def group(key: int, s: int, steps: int) -> tuple[int, int]:
    """The block positions ``[lo, hi)`` of the level-``s`` group of the block at ``key``."""
    width = 1 << (steps - s)
    lo = key >> (steps - s) << (steps - s)
    return lo, lo + width


class Fold(NamedTuple):
    pof2: int
    newrank: int            # this rank among the pof2 participants, -1 if it hands over
    before: list            # op lists before the power-of-two algorithm
    after: list


def fold(rank: int, size: int, everything) -> Fold:
    """The reference library's fold of ranks ``P..N-1`` onto ranks ``2P-N..P-1``."""
    pof2 = 1 << (size.bit_length() - 1)
    extra = size - pof2
    if rank >= pof2:
        return Fold(pof2, -1, [[Send(rank - extra, everything)]],
                    [[Recv(rank - extra, everything)]])
    if rank + extra >= pof2:
        return Fold(pof2, rank, [[Recv(rank + extra, everything, reduce=True)]],
                    [[Send(rank + extra, everything)]])
    return Fold(pof2, rank, [], [])
