"""One-shot allreduce: every rank sends its whole buffer to every other rank, and folds all N.

The custom allreduce of vLLM and TensorRT-LLM for small messages (each GPU
reads every peer's buffer and sums them in rank order), as point-to-point
messages. Every rank folds the same operands in the same order,
``((x0 op x1) op x2) ... op x(N-1)``, so every rank ends with the same bits
(a fold starting from the rank's own ``x_r``, as ``dst = dst op incoming``
does, would associate differently on every rank for ``N >= 3``). Scratch
holds ``N-1`` slots of ``count`` elements: slot ``j-1`` holds ``x_j``.

- exchange (one step): rank r sends its buffer to every other rank. Rank 0
  keeps ``x0`` in its buffer and receives every ``x_j`` into slot ``j-1``;
  rank ``r > 0`` receives ``x0`` into its buffer, every other ``x_j`` into
  slot ``j-1``, and copies its own ``x_r`` (as the step began) into slot
  ``r-1`` with a message to itself. Its k-th send goes to, and its k-th
  receive comes from, rank ``r+k``.
- fold (one step): messages to itself fold slots ``0, 1, ..., N-2`` into the
  buffer, in that order.

Steps: 2. Messages per rank: ``N-1`` of ``M`` bytes (messages to itself are
local copies and folds, not counted). Bytes sent per rank: ``(N-1) * M``,
as many received. Through memory besides: rank ``r > 0`` copies ``M`` (its
own buffer into its slot); every rank folds ``N-1`` buffers of ``M``.
Scratch: ``(N-1) * M`` per rank.
Cost (exact): ``(2N-3)*(alpha + M*beta) + (N-1)*M*gamma + 2*delta``. With one
send and one receive port a rank, :func:`pyar.cost.predict` serves messages
in the order they are matched, rank after rank, so the last rank's ``N-1``
sends start once its peers' receive ports have carried the other ``N-2``
buffers: ``2N-3`` message times on the critical path (the fewest any order
of the exchange's transfers gives there; ``N-1`` if every port ran busy
throughout). That is recursive doubling's time at 2 ranks and its fold's at
3 (with one step less), and more than ``log2 N`` message times beyond: the
model predicts no win, so ``auto`` does not choose one-shot. What it saves,
a single round trip with every peer's buffer read at once over a switch
(NVLink), the port model does not express.
Limits: any ``N >= 1``; ``N-1`` messages in flight per rank and ``(N-1) * M``
of scratch: for small messages on a few ranks (a node).

::

    exchange (one step)                     fold (one step, on every rank)
    0 ── x0 ──► 1, 2, 3   (into data)       data = x0   (rank 0: its own;
    1 ── x1 ──► 0, 2, 3   (into slot 0)                  others: received)
    2 ── x2 ──► 0, 1, 3   (into slot 1)     data = data op slot 0   (x1)
    3 ── x3 ──► 0, 1, 2   (into slot 2)     data = data op slot 1   (x2)
    rank r > 0: data ──► slot r-1 (itself)  data = data op slot 2   (x3)
"""

import itertools

import numpy as np

from ..core.schedule import Chunk, Messages, Recv, Send, Table, Waves, compact
from . import _terms, register_algorithm


def _cost(n, count, m, topology):
    return _terms.Terms(2 * n - 3, (2 * n - 3) * m, (n - 1) * m, 2)


@register_algorithm("one_shot", cost=_cost)
def one_shot(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    data = Chunk("data", 0, count)

    def holds(j):       # where this rank keeps x_j for the fold
        return data if j == 0 else Chunk("scratch", (j - 1) * count, j * count)

    to = [(rank + k) % size for k in range(1, size)]
    exchange = [*(Send(p, data) for p in to), *(Recv(p, holds(p)) for p in to)]
    if rank:
        exchange += [Send(rank, data), Recv(rank, holds(rank))]
    slots = range(1, size)
    fold = [*(Send(rank, holds(j)) for j in slots), *(Recv(rank, data, reduce=True) for _ in slots)]
    return compact([exchange, fold])


def _table(size, count, topology=None):
    """Every rank's steps at once (what :func:`one_shot` returns, as one Table)."""
    if size == 1 or count == 0:
        return Table.compact(size, *([np.zeros(0, np.int64)] * 8))
    r = np.arange(size)[:, None]                # rank, then place in a block of rows
    k = np.arange(1, size)[None, :]
    to = (r + k) % size
    at = np.maximum(to - 1, 0) * count          # where x_to lands: its slot, or data for x0
    own = np.where(r > 0, count, 0)             # (rank 0's copy to itself has no elements)
    mine = np.maximum(r - 1, 0) * count         # slot r-1
    slot = (k - 1) * count
    n = size - 1
    # blocks of rows in the builder's order: rows, then (step, send, peer, scratch, lo, hi, reduce)
    blocks = [(n, 0, True, to, False, 0, count, False),                # x_r to every other rank,
              (n, 0, False, to, to > 0, at, at + count, False),        # x_to from each
              (1, 0, True, r, False, 0, own, False),                   # x_r to itself,
              (1, 0, False, r, True, mine, mine + own, False),         # into slot r-1
              (n, 1, True, r, True, slot, slot + count, False),        # slots 0..N-2, in order,
              (n, 1, False, r, False, 0, count, True)]                 # folded into data
    types = (np.int64, bool, np.int64, bool, np.int64, np.int64, bool)
    columns = [np.concatenate([np.broadcast_to(np.asarray(block[c], t), (size, block[0]))
                               for block in blocks], axis=1).reshape(-1)
               for c, t in enumerate(types, 1)]
    rank = np.repeat(np.arange(size), columns[0].size // size)
    return Table.compact(size, rank, *columns)


def _waves(size, count, topology=None):
    """The same messages a step at a time (a :class:`Waves`; None for one rank or no
    elements): chunk 0 is data, chunk j slot j-1. The exchange in parts: every rank r > 0's
    copy of x_r into its slot, then for each k ranks r > 0 to ``r+k``, then x0 to every other
    rank (last: it lands on the data the other parts read); the fold a part per slot.
    Cost: O(size) a part, ``2N`` parts."""
    if size == 1 or count == 0:
        return None
    j = np.arange(size)
    r, data = j[1:], np.zeros(size - 1, np.int64)

    def steps():
        yield itertools.chain([Messages(r, r, data, r, False)],
                              (Messages(r, (r + k) % size, data, r, False) for k in range(1, size)),
                              [Messages(data, r, data, data, False)])
        yield (Messages(j, j, np.full(size, slot), np.zeros(size, np.int64), True)
               for slot in range(1, size))
    lo = np.maximum(j - 1, 0) * count
    return Waves(j > 0, lo, lo + count, 2, steps)


one_shot.table = _table
one_shot.waves = _waves
