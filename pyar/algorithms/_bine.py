"""Bine trees and butterflies (De Sensi et al., SC 2025): ranks numbered in negabinary.

Among ``P = 2^L`` ranks, each rank v has one ``L``-digit negabinary numeral
``n(v)`` (digits weigh ``1, -2, 4, -8, ...``) whose value is v mod P.
Flipping the lowest ``k+1`` digits of ``n(v)`` moves by ``rho(k) = 1, -1, 3,
-5, 11, ...`` (the value of ``k+1`` ones), in the direction v's parity says:
that is the peer of step k in Swing's butterfly (``_swing.peer``), and the
child at level k in a Bine tree. Peers are nearer than in the binary
trees and butterflies (``|rho(k)| <= (2^(k+1) + 1)/3`` against ``2^k``),
which is what saves links on a torus or a dragonfly.

Tree (root 0): a rank receives in step k (``k = L-1`` down to 0), from the
rank with its lowest ``k+1`` digits flipped, where ``k`` is the largest for
which those digits are all equal (all 0 or all 1), and sends to the rank with
its lowest ``j+1`` digits flipped in every later step j; the root (``n = 0``)
sends in every step.

Butterfly (nearest first): after step s rank v holds the blocks of the ranks
``start(v, s+1) .. start(v, s+1) + 2^(s+1) - 1`` (mod P), a circular range,
so a step is one message, or two where the range wraps past the end.
"""

from __future__ import annotations

import functools

import numpy as np

from . import _swing


@functools.lru_cache(maxsize=32)
def numerals(pof2: int) -> np.ndarray:
    """``n(v)`` for every rank ``v`` in ``[0, pof2)``: its L-digit negabinary numeral."""
    steps = pof2.bit_length() - 1
    n = np.arange(pof2)
    value = np.zeros(pof2, np.int64)
    for d in range(steps):
        value += ((n >> d) & 1) * (-2) ** d
    out = np.empty(pof2, np.int64)
    out[value % pof2] = n                   # the numerals' values are P consecutive integers
    return out


def flip(v: int, k: int, pof2: int) -> int:
    """The rank whose numeral is ``n(v)`` with its lowest ``k+1`` digits flipped, where those
    digits are all equal (as on every tree edge): ``v + rho(k)`` (all 0: v even) or
    ``v - rho(k)`` (all 1: v odd)."""
    return _swing.peer(v, k, pof2)


def receives_at(v: int, pof2: int) -> int:
    """The tree step in which rank ``v`` receives (``L`` for the root, which never does)."""
    steps = pof2.bit_length() - 1
    n = int(numerals(pof2)[v])
    if v == 0:
        return steps
    k = steps - 1
    while True:
        low = n & ((2 << k) - 1)
        if low == 0 or low == (2 << k) - 1:
            return k
        k -= 1


@functools.lru_cache(maxsize=32)
def starts(pof2: int) -> list[np.ndarray]:
    """``starts(P)[t][v]``: the first rank of the circular range of ``2^t`` ranks whose blocks
    rank v holds after ``t`` butterfly steps, nearest first (``t = 0 .. L``)."""
    steps = pof2.bit_length() - 1
    start = [np.arange(pof2)]
    for s in range(steps):
        mine, width = start[-1], 1 << s
        theirs = mine[_swing.peers(s, pof2)]
        after = (mine + width) % pof2 == theirs
        if not (after | ((theirs + width) % pof2 == mine)).all():
            raise AssertionError(f"bine ranges of {pof2} ranks are not adjacent at step {s}")
        start.append(np.where(after, mine, theirs))
    return start


def ranges(first: int, width: int, pof2: int) -> list[tuple[int, int]]:
    """The participant ranges ``[a, b)`` of the circular range of ``width`` from ``first``."""
    if first + width <= pof2:
        return [(first, first + width)]
    return [(first, pof2), (0, first + width - pof2)]
