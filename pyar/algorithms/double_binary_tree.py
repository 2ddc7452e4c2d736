"""Double binary tree allreduce, as NCCL does it: two complementary trees, each for half the data.

Tree A is an in-order binary tree over the ranks: rank 0 at the top with a
single child, every odd rank a leaf. Tree B is tree A with every rank
renumbered, ``r -> N-1-r`` for even N and ``r -> r+1`` for odd N, so the
ranks that are leaves in one tree are inner nodes of the other and every
rank sends and receives about as much as any other. Each tree reduces one
half of the buffer to its top and broadcasts it back down, pipelined in
segments of at most ``segment`` elements: in step t a rank of height h sends
segment ``t-h`` up, folds its children's, and passes segments of the
broadcast down as they arrive, in both trees at once.

Steps: ``G + H + D`` with ``G = ceil(M/2 / segment)`` segments per half,
``H`` the tree height and ``D`` its depth, ``H, D ~ log2 N``. Bytes sent per
rank: at most ``2M`` (``M/2`` up and ``M`` to two children in one tree,
``M/2`` up in the other), like ring. Time: tree latency (``H + D`` steps)
plus ``G`` pipelined steps, in each of which a rank sends up to four
segments of ``m = M/2G`` bytes and folds up to two, so about
``(G + 2 log2 N) * (4 alpha + 4m*beta + 2m*gamma)`` on one-port links
(:mod:`pyar.model.cost` estimates the critical path; it finds 6 to 8 messages per
step on it, as the two trees' steps interlock). Limits: any ``N >= 1``.

::

    tree A (N = 8)        tree B (r -> 7-r)
          0                     7
          4                     3
        2   6                 5   1
       1 3 5 7               6 4 2 0
"""

from __future__ import annotations

import functools

from ..core.schedule import SEGMENT, Chunk, Recv, Send, compact, pieces, segments
from . import register_algorithm
from ._terms import Terms


@functools.lru_cache(maxsize=16)
def tree(size: int):
    """Tree A as ``(parent, children, height, depth)`` lists indexed by rank; the top's parent is -1."""
    parent = [-1] * size
    children = [[] for _ in range(size)]

    def adopt(p, c):
        parent[c] = p
        children[p].append(c)

    if size > 1:
        adopt(0, 1 << ((size - 1).bit_length() - 1))
    for p in range(1, size):
        half = (p & -p) // 2
        if half:
            adopt(p, p - half)
            while half and p + half >= size:
                half //= 2
            if half:
                adopt(p, p + half)
    height, depth = [0] * size, [0] * size
    for p in sorted(range(1, size), key=lambda p: p & -p):     # leaves first
        height[parent[p]] = max(height[parent[p]], height[p] + 1)
    for p in sorted(range(1, size), key=lambda p: -(p & -p)):  # top down
        depth[p] = depth[parent[p]] + 1
    return parent, children, height, depth


@functools.lru_cache(maxsize=16)
def _renumbering(size):
    """Tree B's rank of each tree-A position (a list; memoised, so not to be changed)."""
    if size % 2 == 0:
        return [size - 1 - p for p in range(size)]
    return [(p + 1) % size for p in range(size)]


@functools.lru_cache(maxsize=16)
def _positions(size):
    """Each rank's tree-A position in tree B (the inverse of :func:`_renumbering`)."""
    position = [0] * size
    for p, r in enumerate(_renumbering(size)):
        position[r] = p
    return position


def _pipeline(position, size, rank_of, half, t):
    """The transfers of tree position ``position`` at global step ``t``, for one half."""
    parent, children, height, depth = tree(size)
    top = height[0]
    h, d = height[position], depth[position]
    ops = []

    def segment(s):
        return half[s] if 0 <= s < len(half) else None

    for child in children[position]:
        if (c := segment(t - height[child])) is not None:
            ops.append(Recv(rank_of[child], c, reduce=True))
    if parent[position] >= 0:
        if (c := segment(t - h)) is not None:
            ops.append(Send(rank_of[parent[position]], c))
        if (c := segment(t - top - d + 1)) is not None:
            ops.append(Recv(rank_of[parent[position]], c))
    if (c := segment(t - top - d)) is not None:
        ops.extend(Send(rank_of[child], c) for child in children[position])
    return ops


_PER_SEGMENT = {2: 2, 3: 4, 4: 5}    # steady-state messages per step; 7 for N >= 5


def _cost(n, count, m, topology):
    """An estimate, not exact: the pipeline's critical path under the port model is irregular.

    Exact: ``G + H + D - 1`` steps on it, every message one segment of
    ``m = M/2G`` bytes. Estimated from :func:`pyar.model.cost.predict` of the
    schedules (N <= 64, G <= 32; tests keep the time within a third of it):
    the first segment crosses ``2(H+D-1)`` messages and folds ``H+D-1``;
    each further one adds about 7 messages (a rank's 4 sends and 4 receives
    per step only partly overlap; 2, 4, 5 for N = 2, 3, 4) and 2 folds.
    """
    g = pieces(count - count // 2, SEGMENT)
    _, _, height, depth = tree(n)
    fill = height[0] + max(depth) - 1
    messages = 2 * fill + _PER_SEGMENT.get(n, 7) * (g - 1)
    segment = m / (2 * g)
    return Terms(messages, messages * segment, (fill + 2 * (g - 1)) * segment, g + fill)


@register_algorithm("double_binary_tree", auto=True, exact=False, cost=_cost)
def double_binary_tree(rank, size, count, topology=None, *, segment=SEGMENT):
    if size == 1 or count == 0:
        return []
    middle = count // 2
    parts = pieces(count - middle, segment)
    halves = [segments(0, middle, parts), segments(middle, count, parts)]
    renumbered = _renumbering(size)
    identity = range(size)
    positions = [rank, _positions(size)[rank]]
    rank_of = [identity, renumbered]
    _, _, height, depth = tree(size)
    last = parts - 1 + height[0] + max(depth)
    return compact([*_pipeline(positions[0], size, rank_of[0], halves[0], t),
                    *_pipeline(positions[1], size, rank_of[1], halves[1], t)]
                   for t in range(last + 1))
