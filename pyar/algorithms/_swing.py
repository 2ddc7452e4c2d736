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

On a torus of ``D`` dimensions ``dims`` (``P`` their product, each a power of
two; rank coordinates with dimension 0 fastest, as :func:`pyar.model.network.torus`
numbers its routers), the steps take the dimensions in turn, a dimension left
out once its ``log2`` steps are done; in its ``j``-th step along dimension d a
rank moves its coordinate there by ``rho(j)`` (by ``-rho(j)`` if that
coordinate is odd), the others unchanged. A *port* ``p < 2D`` starts at
dimension ``p mod D`` and, for ``p >= D``, mirrors every distance: the paper's
multi-port Swing runs ``2D`` such collectives side by side on ``2D`` slices of
the vector, so every link of a rank carries data in every step. ``dims = (P,)``,
port 0, is the 1-D Swing above. Both variants take the torus as ``dims``
(``8x8``: powers of two, product ``N``; default one dimension) and the ports as
``ports`` (1 to ``2D``, default 1).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from ..core.schedule import Recv, Send


def rho(s: int) -> int:
    return (1 - (-2) ** (s + 1)) // 3


def torus(dims: str, size: int, ports: int) -> tuple[int, ...]:
    """The torus ``dims`` names (``"8x8"``; ``""``: one dimension of the power of two at or
    below ``size``), checked with ``ports`` (1 to twice its dimensions); ValueError otherwise.
    ``size`` 1 checks the text alone (as a parameterized name is checked where it is named)."""
    text = str(dims)
    try:
        shape = tuple(int(k) for k in text.split("x")) if text else ()
    except ValueError:
        shape = None
    if shape is None or any(k < 2 or k & (k - 1) for k in shape):
        raise ValueError(f"dims must be powers of two >= 2 joined by 'x' (e.g. 8x8), "
                         f"got {text!r}")
    most = 2 * max(len(shape), 1)
    if type(ports) is not int or not 1 <= ports <= most:
        raise ValueError(f"ports must be 1 to {most} (twice the torus's dimensions), "
                         f"got {ports!r}")
    if not shape:
        return (1 << (size.bit_length() - 1),)
    if size > 1 and math.prod(shape) != size:
        raise ValueError(f"dims {text} is a torus of {math.prod(shape)} ranks, not {size}")
    return shape


def _shape(dims) -> tuple[int, ...]:
    return (dims,) if isinstance(dims, int) else tuple(dims)


@functools.lru_cache(maxsize=64)
def steps(dims: tuple[int, ...], port: int = 0) -> tuple[tuple[int, int], ...]:
    """``(dimension, its j-th step)`` of each step of ``port``: dimensions in turn from
    ``port mod D``, each for ``log2`` of its size."""
    left = [k.bit_length() - 1 for k in dims]
    done, order, d = [0] * len(dims), [], port % len(dims)
    while len(order) < sum(left):
        if done[d] < left[d]:
            order.append((d, done[d]))
            done[d] += 1
        d = (d + 1) % len(dims)
    return tuple(order)


def peers(s: int, dims, port: int = 0) -> np.ndarray:
    """Every rank's peer in step ``s`` of ``port`` on the torus ``dims`` (an int ``P``: the
    1-D torus of ``P`` ranks)."""
    dims = _shape(dims)
    d, j = steps(dims, port)[s]
    stride = math.prod(dims[:d])
    r = np.arange(math.prod(dims))
    at = r // stride % dims[d]
    distance = np.where(at % 2 == 0, rho(j), -rho(j)) * (-1 if port >= len(dims) else 1)
    return r + ((at + distance) % dims[d] - at) * stride


def peer(rank: int, s: int, dims, port: int = 0) -> int:
    """Swing's peer of ``rank`` in step ``s`` of ``port`` on the torus ``dims``."""
    return int(_peers(_shape(dims), port)[s][rank])


@functools.lru_cache(maxsize=64)
def _peers(dims: tuple[int, ...], port: int) -> np.ndarray:
    """``[step, rank]``: every step's peers (built once per torus and port)."""
    return np.array([peers(s, dims, port) for s in range(len(steps(dims, port)))],
                    np.int64).reshape(-1, math.prod(dims))


class Layout(NamedTuple):
    steps: int              # log2 P
    key: np.ndarray         # rank -> the position of its block; the top bits name its groups


@functools.lru_cache(maxsize=64)
def layout(dims, port: int = 0) -> Layout:
    """The block position of every rank such that every butterfly group is a range."""
    dims = _shape(dims)
    size = math.prod(dims)
    table = _peers(dims, port)
    n = len(table)
    label = np.arange(size)                 # a group's label: its least rank
    key = np.zeros(size, np.int64)
    for s in range(n - 1, -1, -1):
        other = label[table[s]]
        if (other == label).any():
            raise AssertionError(f"swing groups overlap at step {s} of torus {dims}")
        key |= (label > other).astype(np.int64) << (n - 1 - s)
        label = np.minimum(label, other)
    if len(set(key.tolist())) != size:
        raise AssertionError(f"swing groups of torus {dims} are not a butterfly")
    return Layout(n, key)


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
